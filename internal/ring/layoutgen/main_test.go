package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSpecChecks: the committed spec loads; a spec whose fields overlap,
// are misaligned, leave their record, or whose wait buckets disagree with
// the consumer record is refused, naming the field.
func TestSpecChecks(t *testing.T) {
	good, err := os.ReadFile("../../../api/ring/v1/control_block.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := load("../../../api/ring/v1/control_block.json"); err != nil {
		t.Fatalf("the committed spec: %v", err)
	}
	cases := map[string]struct{ from, to, want string }{
		"overlap":    {`"name": "stride", "offset": 24`, `"name": "stride", "offset": 16`, "overlap"},
		"misaligned": {`"name": "published", "offset": 32`, `"name": "published", "offset": 36`, "not a multiple"},
		"outside":    {`"name": "consumer_records", "offset": 72`, `"name": "consumer_records", "offset": 128`, "outside"},
		"buckets":    {`"wait_buckets": {"count": 12`, `"wait_buckets": {"count": 13`, "wait_buckets"},
		"type":       {`"name": "lines", "offset": 8, "type": "u32"`, `"name": "lines", "offset": 8, "type": "u16"`, "type"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(string(good), c.from) {
				t.Fatalf("the spec no longer holds %s", c.from)
			}
			p := filepath.Join(t.TempDir(), "spec.json")
			if err := os.WriteFile(p, []byte(strings.Replace(string(good), c.from, c.to, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := load(p); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one saying %q", err, c.want)
			}
		})
	}
}

// TestRenderedLayoutAgrees: the Go and Python renderings give every field
// the spec's offset.
func TestRenderedLayoutAgrees(t *testing.T) {
	s, err := load("../../../api/ring/v1/control_block.json")
	if err != nil {
		t.Fatal(err)
	}
	goSrc, pySrc := goSource(s), pySource(s)
	for _, f := range s.ConsumerRecord.Fields {
		if !strings.Contains(pySrc, "CONSUMER_RECORD_"+strings.ToUpper(f.Name)+": Final = ") ||
			!strings.Contains(goSrc, "ConsumerRecord"+camel(f.Name)+" = ") {
			t.Errorf("field %s is missing from a rendering", f.Name)
		}
	}
}
