package state

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestConfigSkipsAtResume: a config's skip_steps at a resume after step 100:
// a range the log holds is no change; one wholly before the step that the
// log lacks is a warning, nothing skipped; one that holds the step skips
// what is ahead of it; one ahead is added; one overlapping a logged range
// is refused naming both.
func TestConfigSkipsAtResume(t *testing.T) {
	logged := []SkipRange{{40, 50}}
	for _, tc := range []struct {
		name     string
		config   []SkipRange
		want     []SkipRange
		warnings int
		err      string
	}{
		{"logged", []SkipRange{{40, 50}}, []SkipRange{{40, 50}}, 0, ""},
		{"before, not logged", []SkipRange{{60, 80}}, []SkipRange{{40, 50}}, 1, ""},
		{"straddling", []SkipRange{{90, 120}}, []SkipRange{{40, 50}, {101, 120}}, 0, ""},
		{"ahead", []SkipRange{{40, 50}, {200, 300}}, []SkipRange{{40, 50}, {200, 300}}, 0, ""},
		{"ending at the step", []SkipRange{{95, 100}}, []SkipRange{{40, 50}}, 1, ""},
		{"overlapping", []SkipRange{{45, 120}}, nil, 0, "[45, 120]: steps 101 to 120"},
		// A range that held an earlier resumed step (95) was logged cut to
		// the steps after it: the same key at this resume is that range.
		{"cut by an earlier resume", []SkipRange{{30, 60}}, []SkipRange{{40, 60}}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := logged
			switch tc.name {
			case "overlapping":
				log = []SkipRange{{40, 50}, {110, 130}}
			case "cut by an earlier resume":
				log = []SkipRange{{40, 60}}
			}
			got, warnings, err := ConfigSkips(log, tc.config, 100)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "steps 110 to 130") {
					t.Fatalf("got %v, %v; want an error naming %q and the logged range", got, err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) || len(warnings) != tc.warnings {
				t.Fatalf("got %v, warnings %q, %v; want %v and %d warnings", got, warnings, err, tc.want, tc.warnings)
			}
		})
	}
}

// TestCheckSkips: a list of ranges is refused, naming the field, the index
// and the range, where a first step is 0 or after its last, or ranges are
// out of order or overlap, or too many.
func TestCheckSkips(t *testing.T) {
	for _, tc := range []struct {
		skips []SkipRange
		err   string
	}{
		{[]SkipRange{{0, 3}}, "skip_steps[0] [0, 3]: steps count from 1"},
		{[]SkipRange{{5, 3}}, "skip_steps[0] [5, 3]: the first step is after the last"},
		{[]SkipRange{{5, 9}, {9, 12}}, "skip_steps[1] [9, 12] starts at or before the end of the range before it [5, 9]"},
		{[]SkipRange{{5, 9}, {1, 2}}, "skip_steps[1] [1, 2]"},
		{make([]SkipRange, 3), "holds 3 ranges, more than the 2"},
		{[]SkipRange{{1, MaxSkipRange + 1}}, "is 1048577 steps, more than the 1048576"},
		{[]SkipRange{{1 << 50, 1 << 50}}, "steps must be at most 281474976710656"},
	} {
		if err := CheckSkips("skip_steps", tc.skips, 2); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: %v, want %q", tc.skips, err, tc.err)
		}
	}
	if err := CheckSkips("skip_steps", []SkipRange{{1, 1}, {2, 5}}, 2); err != nil {
		t.Error(err)
	}
}

// TestSkipsVersionAndMerge: a state that logs skips is written as version
// 5 (a file and a run part) and reads back; files of one world whose logs
// agree merge into their union; logs that disagree are refused naming the
// ranges and the files.
func TestSkipsVersionAndMerge(t *testing.T) {
	fp := Fingerprint{SeqLen: 15, LogicalShards: 2, Datasets: []DatasetPrint{{Name: "a", Format: "megatron"}}}
	rank := func(r uint32, skips ...SkipRange) []byte {
		b, err := Encode(fp, Rank{DPRank: r, DPSize: 2, Step: 30, Shards: map[ShardID]Shard{{0, r}: {}}, Skips: skips})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var v struct {
		Version int         `json:"version"`
		Skips   []SkipRange `json:"skips"`
	}
	b := rank(0, SkipRange{10, 20})
	if err := json.Unmarshal(b, &v); err != nil || v.Version != 5 || len(v.Skips) != 1 {
		t.Fatalf("written as %+v, %v; want version 5 with its skips", v, err)
	}
	sh, _ := Split(fp, Rank{DPRank: 0, DPSize: 1, Step: 3, Skips: []SkipRange{{10, 20}}})
	if err := json.Unmarshal(sh.Run, &v); err != nil || v.Version != 5 {
		t.Fatalf("run part written as %+v, %v; want version 5", v, err)
	}
	got, err := Merge(fp, []string{"rank-0", "rank-1"}, [][]byte{rank(0, SkipRange{10, 20}), rank(1, SkipRange{10, 20}, SkipRange{40, 45})})
	if err != nil || !reflect.DeepEqual(got.Skips, []SkipRange{{10, 20}, {40, 45}}) {
		t.Fatalf("merged %v, %v", got, err)
	}
	_, err = Merge(fp, []string{"rank-0-of-2.json", "rank-1-of-2.json"}, [][]byte{rank(0, SkipRange{10, 20}), rank(1, SkipRange{10, 25})})
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "rank-0-of-2.json skips steps 10 to 20, rank-1-of-2.json skips steps 10 to 25") {
		t.Fatalf("conflicting logs: %v", err)
	}
}
