package state

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestBlocklistsKept: a state logging blocklists is written as version 5
// (a daemon reading up to 4 refuses it rather than serve what it blocks),
// in both forms, and reads back with its log, through Merge and a split
// state's Restore; one with none stays at its older version.
func TestBlocklistsKept(t *testing.T) {
	fp := Fingerprint{SeqLen: 15, LogicalShards: 2, Datasets: []DatasetPrint{{Name: "a"}}}
	log := []Blocklist{{Fingerprint: "0123456789abcdef", Entries: 3, Step: 2}, {Step: 4}}
	r := Rank{DPRank: 0, DPSize: 1, Step: 5, Shards: map[ShardID]Shard{{0, 0}: {}, {0, 1}: {}}, Blocklists: log}
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
			Version    int         `json:"version"`
			Blocklists []Blocklist `json:"blocklists"`
		}
		if err := json.Unmarshal(raw, &v); err != nil || v.Version != 5 || !reflect.DeepEqual(v.Blocklists, log) {
			t.Errorf("%s: version %d, blocklists %+v (%v)", form, v.Version, v.Blocklists, err)
		}
	}
	if _, got, err := Decode("rank file", b); err != nil || !reflect.DeepEqual(got.Blocklists, log) {
		t.Errorf("decoded %+v, %v", got.Blocklists, err)
	}
	if m, err := Merge(fp, []string{"rank 0"}, [][]byte{b}); err != nil || !reflect.DeepEqual(m.Blocklists, log) {
		t.Errorf("merged %+v, %v", m, err)
	}
	if got, err := sh.Restore(fp, 0, 1); err != nil || !reflect.DeepEqual(got.Blocklists, log) {
		t.Errorf("restored %+v, %v", got, err)
	}
	r.Blocklists = nil
	if plain, _ := Encode(fp, r); !strings.Contains(string(plain), `"version":3`) || strings.Contains(string(plain), "blocklists") {
		t.Errorf("a state with no blocklist: %s", plain)
	}
}

// TestBlocklistsRefused: a log with a bad fingerprint, entries that do not
// match it, or steps out of order or past the state's is refused by name.
func TestBlocklistsRefused(t *testing.T) {
	fp := Fingerprint{SeqLen: 15, LogicalShards: 1, Datasets: []DatasetPrint{{Name: "a"}}}
	for _, tc := range []struct {
		log  []Blocklist
		want string
	}{
		{[]Blocklist{{Fingerprint: "xyz", Entries: 1}}, `blocklists[0]: fingerprint "xyz" is not 16 hex digits`},
		{[]Blocklist{{Fingerprint: "0123456789abcdef"}}, `blocklists[0]: 0 entries`},
		{[]Blocklist{{Step: 9}}, `blocklists[0]: step 9 is past the state's step 5`},
		{[]Blocklist{{Step: 3}, {Step: 2}}, `blocklists[1]: step 2 is before`},
	} {
		r := Rank{DPRank: 0, DPSize: 1, Step: 5, Shards: map[ShardID]Shard{{0, 0}: {}}, Blocklists: tc.log}
		b, _ := Encode(fp, r)
		sh, _ := Split(fp, r)
		_, _, err := Decode("rank file", b)
		_, serr := sh.Restore(fp, 0, 1)
		for _, e := range []error{err, serr} {
			if e == nil || !strings.Contains(e.Error(), tc.want) {
				t.Errorf("%+v: %v, want %q", tc.log, e, tc.want)
			}
		}
	}
}

// TestBlocklistsMerged: the files of one world saved at different steps
// merge to the log of the latest (rank 0's file, saved before the
// blocklist arrived, does not hide it); logs that disagree are refused,
// naming both files; a log never grows past what a read allows.
func TestBlocklistsMerged(t *testing.T) {
	fp := Fingerprint{SeqLen: 15, LogicalShards: 2, Datasets: []DatasetPrint{{Name: "a"}}}
	rec := Blocklist{Fingerprint: "0123456789abcdef", Entries: 3, Step: 6}
	file := func(rank uint32, step uint64, log ...Blocklist) []byte {
		r := Rank{DPRank: rank, DPSize: 2, Step: step, Shards: map[ShardID]Shard{{0, rank}: {}}, Blocklists: log}
		b, err := Encode(fp, r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	names := []string{"rank-0", "rank-1"}
	m, err := Merge(fp, names, [][]byte{file(0, 5), file(1, 9, rec)})
	if err != nil || !reflect.DeepEqual(m.Blocklists, []Blocklist{rec}) {
		t.Errorf("merged %+v, %v; want the later file's log", m.Blocklists, err)
	}
	other := Blocklist{Fingerprint: "fedcba9876543210", Entries: 1, Step: 6}
	_, err = Merge(fp, names, [][]byte{file(0, 9, rec), file(1, 9, other)})
	if err == nil || !strings.Contains(err.Error(), "the blocklist logs disagree") || !strings.Contains(err.Error(), "rank-0") ||
		!strings.Contains(err.Error(), "rank-1") {
		t.Errorf("disagreeing logs: %v", err)
	}
	var log []Blocklist
	for i := range maxBlocklists + 5 {
		log = AddBlocklist(log, Blocklist{Step: uint64(i)})
	}
	if len(log) != maxBlocklists || log[len(log)-1].Step != maxBlocklists+4 || checkBlocklists(log, maxBlocklists+4) != nil {
		t.Errorf("a log of %d records after %d additions, last step %d", len(log), maxBlocklists+5, log[len(log)-1].Step)
	}
}
