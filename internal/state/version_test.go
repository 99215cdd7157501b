package state

import (
	"encoding/json"
	"testing"
)

// TestVersionWrittenForRuns: a state whose fingerprint reads units in runs
// is written as version 4, which a daemon from before runs (reading up to
// 3) refuses; any other state stays version 3, which such a daemon reads.
// Both forms (a rank file, the run part of a split state) read back.
func TestVersionWrittenForRuns(t *testing.T) {
	for _, tc := range []struct {
		runs uint64
		want int
	}{{0, 3}, {1 << 17, 4}} {
		fp := Fingerprint{SeqLen: 15, LogicalShards: 2, RunTokens: tc.runs}
		r := Rank{DPRank: 0, DPSize: 1, Step: 3, Shards: map[ShardID]Shard{{0, 0}: {}, {0, 1}: {}}}
		b, err := Encode(fp, r)
		if err != nil {
			t.Fatal(err)
		}
		sh, err := Split(fp, r)
		if err != nil {
			t.Fatal(err)
		}
		for form, raw := range map[string][]byte{"file": b, "run part": sh.Run} {
			var v struct {
				Version int `json:"version"`
			}
			if err := json.Unmarshal(raw, &v); err != nil || v.Version != tc.want {
				t.Errorf("run_tokens %d, %s: version %d (%v), want %d", tc.runs, form, v.Version, err, tc.want)
			}
		}
		if got, _, err := Decode("rank file", b); err != nil || got.RunTokens != tc.runs {
			t.Errorf("run_tokens %d: read back %+v, %v", tc.runs, got, err)
		}
	}
}
