package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// saveAtSteps saves a world of len(steps) ranks over fp's shards of one
// dataset, rank q at steps[q], each cursor distinct and large (a file of
// some 300 shards is several times StepPrefixBytes), and returns the
// folder.
func saveAtSteps(t *testing.T, fp Fingerprint, steps []uint64) string {
	t.Helper()
	folder := t.TempDir()
	w := uint32(len(steps))
	for q := uint32(0); q < w; q++ {
		st := Rank{DPRank: q, DPSize: w, Step: steps[q], Shards: map[ShardID]Shard{},
			Mixture: []MixChange{{Step: 0, Weights: []float64{1}}}}
		lo, hi := Owned(q, w, fp.LogicalShards)
		for k := lo; k < hi; k++ {
			st.Shards[ShardID{0, k}] = Shard{Lines: 1e12 + uint64(k), Window: Cursor{Epoch: 3, Pos: 1e9 + uint64(k), Offset: 1e6}, Taken: 7e11, Base: 2}
		}
		if _, _, err := Save(dirFolder(folder), fp, st); err != nil {
			t.Fatal(err)
		}
	}
	return folder
}

// TestResumedRanksTakeTheWorldsStep: a world of 3 ranks saved at steps 5, 6
// and 7 (each rank's latest save before a crash) resumed onto 1, 2 or 3
// ranks: every resumed rank takes step 7, as when every rank read every
// file, and the shards it owns from the files that hold them. It reads
// whole only the files whose shards overlap its own, and of each other
// file at most StepPrefixBytes. Before, a rank took the highest step of the
// files it read: onto 3 ranks, rank q resumed at step 5+q, and onto 2, rank
// 0 at step 6, rank 1 at 7.
func TestResumedRanksTakeTheWorldsStep(t *testing.T) {
	fp := testPrint()
	fp.LogicalShards = 900 // 300 a saved rank
	folder := saveAtSteps(t, fp, []uint64{5, 6, 7})
	blobs, names, err := ReadFolder(dirFolder(folder))
	if err != nil {
		t.Fatal(err)
	}
	all, err := Merge(fp, names, blobs)
	if err != nil || all.Step != 7 {
		t.Fatalf("the whole world's merge: step %v, %v; want 7", all, err)
	}
	size := map[string]int{}
	for q, b := range blobs {
		if len(b) <= 2*StepPrefixBytes {
			t.Fatalf("%s is %d bytes: too small to tell a prefix from the whole", names[q], len(b))
		}
		size[filepath.Base(names[q])] = len(b)
	}
	for _, c := range []struct {
		w    uint32
		want [][]string // the files each rank reads whole
	}{
		{1, [][]string{{"rank-0-of-3.json", "rank-1-of-3.json", "rank-2-of-3.json"}}},
		{2, [][]string{{"rank-0-of-3.json", "rank-1-of-3.json"}, {"rank-1-of-3.json", "rank-2-of-3.json"}}},
		{3, [][]string{{"rank-0-of-3.json"}, {"rank-1-of-3.json"}, {"rank-2-of-3.json"}}},
	} {
		for r := uint32(0); r < c.w; r++ {
			t.Run(fmt.Sprintf("rank %d of %d", r, c.w), func(t *testing.T) {
				f := &countingFolder{dirFolder: dirFolder(folder)}
				got, err := ReadOwned(f, fp, r, c.w)
				if err != nil {
					t.Fatal(err)
				}
				if got.Step != 7 || got.FromSize != 3 || got.MixturesDiffer {
					t.Fatalf("resumed at step %d from %d ranks (mixtures differ: %v), want step 7 from 3", got.Step, got.FromSize, got.MixturesDiffer)
				}
				sort.Strings(f.read)
				if !reflect.DeepEqual(f.read, c.want[r]) {
					t.Fatalf("read whole %v, want %v", f.read, c.want[r])
				}
				for name, n := range size {
					whole := f.whole[name] == n
					if f.whole[name] != 0 && !whole || whole != slices.Contains(c.want[r], name) {
						t.Fatalf("%s: %d of its %d bytes read whole", name, f.whole[name], n)
					}
					if p := f.prefix[name]; p == 0 || p > StepPrefixBytes {
						t.Fatalf("%s: %d bytes of its start read, want 1 to %d", name, p, StepPrefixBytes)
					}
				}
				lo, hi := Owned(r, c.w, fp.LogicalShards)
				for k := lo; k < hi; k++ {
					if id := (ShardID{0, k}); got.Shards[id] != all.Shards[id] {
						t.Fatalf("%v: %+v, the whole world's merge has %+v", id, got.Shards[id], all.Shards[id])
					}
				}
			})
		}
	}
}

// TestPeerStepRefused: a rank file whose start gives no step is refused by
// name, whether the rank resuming needs the file whole (then a file that is
// no state at all is refused as such, and one too large as such) or only
// its step. A rank resuming onto 2 ranks needs rank-1-of-2.json whole for
// rank 1, and only its step for rank 0.
func TestPeerStepRefused(t *testing.T) {
	fp := testPrint()
	fp.LogicalShards = 8
	pad := strings.Repeat(" ", StepPrefixBytes)
	for _, c := range []struct {
		name, contents string
		rank0, rank1   string // what each rank's refusal says
	}{
		{"not JSON", "{damaged", "not a dataloaderd state file", "not a dataloaderd state file"},
		{"step past the prefix", `{"version":3,"dp_rank":1,"dp_size":2,` + pad + `"step":4}`, `no top-level "step" within its first 4096 bytes`, `no top-level "step" within its first 4096 bytes`},
		{"no step", `{"version":3,"dp_rank":1,"dp_size":2}`, `it has no "step"`, `it has no "step"`},
		{"negative step", `{"version":3,"step":-4}`, "cannot unmarshal number -4", "cannot unmarshal number -4"},
		{"step cut", `{"version":3,"step":4` + pad, `no top-level "step" within its first 4096 bytes`, "not a dataloaderd state file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			folder := saveWorld(t, fp, 2)
			path := filepath.Join(folder, Dir, "rank-1-of-2.json")
			if err := os.WriteFile(path, []byte(c.contents), 0o644); err != nil {
				t.Fatal(err)
			}
			for r, want := range []string{c.rank0, c.rank1} {
				_, err := ReadOwned(dirFolder(folder), fp, uint32(r), 2)
				if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), path+": ") || !strings.Contains(err.Error(), want) {
					t.Fatalf("rank %d of 2: %v, want ErrMismatch naming %s and saying %q", r, err, path, want)
				}
			}
		})
	}
}

// TestStepOf: the top-level step is read from a file's start, past keys
// and nested values before it (whose own "step" keys are not it), and a
// number cut by the prefix's end is not taken for a smaller one.
func TestStepOf(t *testing.T) {
	b, err := Encode(testPrint(), Rank{DPRank: 1, DPSize: 2, Step: 123456789, Shards: map[ShardID]Shard{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in   string
		want uint64
		err  string
	}{
		{string(b), 123456789, ""},
		{string(b[:strings.Index(string(b), "123456789")+5]), 0, "within its first"},
		{`{"mixture":[{"step":9,"weights":[1]}],"x":{"step":8},"step":7}`, 7, ""},
		{`{"step": 3 ,"fingerprint":`, 3, ""},
		{`{"step":3}`, 3, ""},
		{`{"step":3x}`, 0, "not a dataloaderd state file"},
		{`{"step":1.5}`, 0, "cannot unmarshal number 1.5"},
		{`{"step":18446744073709551616}`, 0, "cannot unmarshal number"},
		{`["step",3]`, 0, "not a JSON object"},
		{``, 0, "not a JSON object"},
	} {
		got, err := stepOf([]byte(c.in))
		if c.err == "" && (err != nil || got != c.want) || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("stepOf(%.60q) = %d, %v; want %d, %q", c.in, got, err, c.want, c.err)
		}
	}
}

// TestStepReadTwiceMustAgree: a state whose start says another step than
// its whole (a file that changed between the two reads, or JSON naming
// "step" twice, the first read taking the first, the decoder the last) is
// refused by name.
func TestStepReadTwiceMustAgree(t *testing.T) {
	fp := testPrint()
	b, err := Encode(fp, world(1)[0])
	if err != nil {
		t.Fatal(err)
	}
	twice := strings.Replace(string(b), `"step":7`, `"step":2,"step":7`, 1)
	_, err = Merge(fp, []string{"twice"}, [][]byte{[]byte(twice)})
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "twice is of step 7, but its start, read first, said step 2") {
		t.Fatalf("a state naming its step twice: %v", err)
	}
}

// TestMixturesComparedAtResumedStep: rank files of one world saved at steps
// 5 and 7 log the same change of weights for step 6, queued in the first,
// in effect in the second: they mix the batches after the resumed step 7
// alike, and a rank merging both keeps the change (MixturesDiffer unset),
// as a rank reading one of them does. Before, each log was taken at its own
// file's step, the two were found to differ and the change was dropped for
// the configured weights on the ranks that read both files, not on the
// others. Logs that do differ after step 7 are still found to.
func TestMixturesComparedAtResumedStep(t *testing.T) {
	fp := testPrint()
	fp.LogicalShards = 8
	fp.Datasets = append(fp.Datasets, DatasetPrint{Name: "b", Format: "megatron", Files: 1, Bytes: 50, Units: 5, Digest: "y"})
	logOf := func(ws ...float64) []MixChange {
		return []MixChange{{Step: 0, Weights: []float64{1, 1}}, {Step: 6, Weights: ws, Runtime: true}}
	}
	for _, c := range []struct {
		name   string
		logs   [][]MixChange
		differ bool
	}{
		{"the same change", [][]MixChange{logOf(3, 1), logOf(3, 1)}, false},
		{"another change", [][]MixChange{logOf(3, 1), logOf(1, 3)}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			folder := saveTwoDatasets(t, fp, []uint64{5, 7}, c.logs)
			blobs, names, err := ReadFolder(dirFolder(folder))
			if err != nil {
				t.Fatal(err)
			}
			inline, err := Merge(fp, names, blobs)
			if err != nil {
				t.Fatal(err)
			}
			owned, err := ReadOwned(dirFolder(folder), fp, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			for how, got := range map[string]*Restored{"inline": inline, "folder": owned} {
				if got.Step != 7 || got.MixturesDiffer != c.differ || !reflect.DeepEqual(got.Mixture, c.logs[0]) {
					t.Fatalf("%s: step %d, mixtures differ %v, log %+v; want step 7, differ %v, rank 0's log", how, got.Step, got.MixturesDiffer, got.Mixture, c.differ)
				}
			}
		})
	}
}

// saveTwoDatasets saves a world of len(steps) ranks over fp's shards of its
// two datasets, rank q at steps[q] with log logs[q], and returns the folder.
func saveTwoDatasets(t *testing.T, fp Fingerprint, steps []uint64, logs [][]MixChange) string {
	t.Helper()
	folder := t.TempDir()
	w := uint32(len(steps))
	for q := uint32(0); q < w; q++ {
		st := Rank{DPRank: q, DPSize: w, Step: steps[q], Shards: map[ShardID]Shard{}, Mixture: logs[q]}
		lo, hi := Owned(q, w, fp.LogicalShards)
		for d := range fp.Datasets {
			for k := lo; k < hi; k++ {
				st.Shards[ShardID{d, k}] = Shard{Lines: 10, Window: Cursor{Pos: uint64(k)}, Taken: 1}
			}
		}
		if _, _, err := Save(dirFolder(folder), fp, st); err != nil {
			t.Fatal(err)
		}
	}
	return folder
}
