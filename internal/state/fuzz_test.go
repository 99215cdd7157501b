package state

import "testing"

// FuzzDecode: no state file, however corrupt, makes Decode panic, and what
// Decode accepts encodes back to an equal state.
func FuzzDecode(f *testing.F) {
	for _, st := range world(2) {
		b, _ := Encode(testPrint(), st)
		f.Add(b)
	}
	f.Add([]byte(`{"version":1,"dp_rank":0,"dp_size":1,"shards":[{"dataset":0,"first":0,"lines":[1],"epoch":[],"pos":[],"offset":[],"taken":[]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fp, r, err := Decode("fuzz", b)
		if err != nil {
			return
		}
		again, err := Encode(fp, r)
		if err != nil {
			return // shard runs that cannot be contiguous are refused on encode
		}
		_, r2, err := Decode("again", again)
		if err != nil || len(r2.Shards) != len(r.Shards) {
			t.Fatalf("re-decode: %v, %d shards vs %d", err, len(r2.Shards), len(r.Shards))
		}
	})
}
