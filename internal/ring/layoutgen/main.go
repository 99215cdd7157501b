// Command layoutgen turns the control block's spec
// (api/ring/v1/control_block.json) into the constants the daemon and the
// Python client read it by, and into its documentation, so that the layout
// is written once. It checks the spec first: every field inside its record,
// aligned to its size, and no two fields overlapping.
//
//	go run ./internal/ring/layoutgen -spec api/ring/v1/control_block.json \
//	    -go internal/ring/layout.go -py clients/python/src/dataloaderd/_ring_layout.py \
//	    -md docs/control-block.md
//
// make generate runs it; make generate-check fails when the committed files
// differ from what it writes.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"go/format"
	"os"
	"strings"
)

// spec is the JSON spec.
type spec struct {
	Doc            string   `json:"doc"`
	Version        int      `json:"version"`
	Magic          string   `json:"magic"`
	Header         record   `json:"header"`
	SlotRecord     record   `json:"slot_record"`
	ConsumerRecord record   `json:"consumer_record"`
	States         []state  `json:"states"`
	WaitBuckets    buckets  `json:"wait_buckets"`
	path           string   // where it was read from
	records        []*named // header, slot record, consumer record
}

type record struct {
	Doc    string  `json:"doc"`
	Bytes  int     `json:"bytes"`
	Align  int     `json:"align"`
	Fields []field `json:"fields"`
}

// named is a record with the names its constants take.
type named struct {
	*record
	goName, pyName, title string
}

type field struct {
	Name   string `json:"name"`
	Offset int    `json:"offset"`
	Type   string `json:"type"`
	Count  int    `json:"count"`
	Doc    string `json:"doc"`
}

type state struct {
	Name  string `json:"name"`
	Value int    `json:"value"`
	Doc   string `json:"doc"`
}

type buckets struct {
	Count   int     `json:"count"`
	FirstNs float64 `json:"first_ns"`
	Factor  float64 `json:"factor"`
}

func main() {
	specPath := flag.String("spec", "api/ring/v1/control_block.json", "the control block's JSON spec")
	goOut := flag.String("go", "", "write the Go constants here")
	pyOut := flag.String("py", "", "write the Python constants here")
	mdOut := flag.String("md", "", "write the Markdown description here")
	flag.Parse()
	if err := run(*specPath, *goOut, *pyOut, *mdOut); err != nil {
		fmt.Fprintln(os.Stderr, "layoutgen:", err)
		os.Exit(1)
	}
}

func run(specPath, goOut, pyOut, mdOut string) error {
	s, err := load(specPath)
	if err != nil {
		return err
	}
	for _, out := range []struct {
		path   string
		render func(*spec) string
	}{{goOut, goSource}, {pyOut, pySource}, {mdOut, markdown}} {
		if out.path == "" {
			continue
		}
		b := []byte(out.render(s))
		if strings.HasSuffix(out.path, ".go") {
			if b, err = format.Source(b); err != nil {
				return fmt.Errorf("%s: %w", out.path, err)
			}
		}
		if err := os.WriteFile(out.path, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// load reads and checks the spec.
func load(path string) (*spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s spec
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s.path = path
	s.records = []*named{
		{&s.Header, "Header", "HEADER", "Header"},
		{&s.SlotRecord, "SlotRecord", "SLOT_RECORD", "Slot record"},
		{&s.ConsumerRecord, "ConsumerRecord", "CONSUMER_RECORD", "Consumer record"},
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &s, nil
}

func (s *spec) check() error {
	if s.Version < 1 || len(s.Magic) != 8 {
		return fmt.Errorf("version %d and magic %q: want a version >= 1 and 8 magic bytes", s.Version, s.Magic)
	}
	for _, r := range s.records {
		if err := r.check(); err != nil {
			return fmt.Errorf("%s: %w", r.title, err)
		}
	}
	if f := s.ConsumerRecord.field("wait_buckets"); f == nil || f.Count != s.WaitBuckets.Count {
		return fmt.Errorf("consumer record wait_buckets must hold wait_buckets.count (%d) counters", s.WaitBuckets.Count)
	}
	if s.WaitBuckets.FirstNs <= 0 || s.WaitBuckets.Factor <= 1 {
		return fmt.Errorf("wait_buckets: first_ns %v, factor %v: want > 0 and > 1", s.WaitBuckets.FirstNs, s.WaitBuckets.Factor)
	}
	return nil
}

// check refuses a field that leaves the record, is not aligned to its
// size, or overlaps another.
func (r *named) check() error {
	if r.Bytes <= 0 || (r.Align != 0 && r.Bytes%r.Align != 0) {
		return fmt.Errorf("size %d, align %d", r.Bytes, r.Align)
	}
	used := make([]string, r.Bytes)
	for _, f := range r.Fields {
		size := typeSize(f.Type)
		if size == 0 {
			return fmt.Errorf("field %s: type %q (want u32 or u64)", f.Name, f.Type)
		}
		if f.Offset%size != 0 {
			return fmt.Errorf("field %s: offset %d is not a multiple of its %d bytes", f.Name, f.Offset, size)
		}
		end := f.Offset + size*max(f.Count, 1)
		if f.Offset < 0 || end > r.Bytes {
			return fmt.Errorf("field %s: bytes [%d, %d) outside the record's %d", f.Name, f.Offset, end, r.Bytes)
		}
		for i := f.Offset; i < end; i++ {
			if used[i] != "" {
				return fmt.Errorf("fields %s and %s overlap at byte %d", used[i], f.Name, i)
			}
			used[i] = f.Name
		}
	}
	return nil
}

func (r *record) field(name string) *field {
	for i := range r.Fields {
		if r.Fields[i].Name == name {
			return &r.Fields[i]
		}
	}
	return nil
}

func typeSize(t string) int {
	switch t {
	case "u32":
		return 4
	case "u64":
		return 8
	}
	return 0
}

// bounds are the upper bounds of the wait buckets, in nanoseconds.
func (s *spec) bounds() []int64 {
	out := make([]int64, s.WaitBuckets.Count)
	b := s.WaitBuckets.FirstNs
	for i := range out {
		out[i] = int64(b)
		b *= s.WaitBuckets.Factor
	}
	return out
}

// camel turns snake_case into CamelCase.
func camel(s string) string {
	parts := strings.Split(s, "_")
	for i, p := range parts {
		if p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, "")
}

// escapeMagic writes the magic as a Go or Python string literal body.
func escapeMagic(m string) string {
	var b strings.Builder
	for _, c := range []byte(m) {
		if c >= 0x20 && c < 0x7f && c != '"' && c != '\\' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "\\x%02x", c)
		}
	}
	return b.String()
}
