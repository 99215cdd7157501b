package stream

import (
	"encoding/binary"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// openTripDelay is what the proxy of TestObjectsMegatronOpenOneTrip adds
// to every request: far longer than it takes the open to send the GETs it
// sends together, so that those arrive before any of them is answered.
const openTripDelay = 200 * time.Millisecond

// openTripBlock is its cache's block: the 2 MB index is 123 blocks, and
// what the open reads of it, the GETs of fewer than the 32 fetchers.
const openTripBlock = 16 << 10

// TestObjectsMegatronOpenOneTrip: the open of a Megatron dataset whose
// index spans many blocks asks for everything it reads of the index in
// one round trip to the store: the header, the first and last entries,
// and the entries where the shards and their runs are cut, guessed from
// the objects' sizes (source's megatronguess.go), where it took three,
// one after the other. An index whose size does not give its counts
// (documents of two sequences each) opens as before, in more round trips.
// Both serve the local files' batches. The documents are of one length,
// so that the offsets grow evenly, the guesses are exact and no search
// probes past them: the trips are the open's, not its searches'.
func TestObjectsMegatronOpenOneTrip(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "trips")
	docs := evenDocs(100_001, 5)
	dir := t.TempDir()
	prefix := testcorpus.Megatron(t, dir, "one", docs)
	testcorpus.Megatron(t, dir, "paired", docs)
	pairDocuments(t, dir+"/paired.idx")
	srv.PutDir(t, "trips", "meg/", dir)
	for _, c := range []struct {
		name  string
		trips int
	}{{"one", 1}, {"paired", 3}} {
		t.Run(c.name, func(t *testing.T) {
			local := Dataset{Name: "meg", Path: prefix, Format: "megatron", Weight: 1}
			remote := local
			remote.Path = "s3://trips/meg/" + c.name
			got := openTrips(t, srv, remote, local)
			if got != c.trips {
				t.Fatalf("%s: the open's GETs of the index went in %d round trips, want %d", remote.Path, got, c.trips)
			}
		})
	}
}

// openTrips opens remote through a proxy that delays every request by
// openTripDelay, checks that rank 0 of 2 serves the batches of local, and
// returns in how many round trips the open's GETs of the index went
// (their distinct counts of requests answered before they arrived).
func openTrips(t *testing.T, srv *s3test.Server, remote, local Dataset) int {
	t.Helper()
	proxy := s3test.NewFaultProxy(t, srv.Endpoint, 0, 1)
	proxy.SetDelay(openTripDelay)
	proxy.KeepLog()
	store := newStore(t, srv, proxy.URL, objstore.Options{BlockSize: openTripBlock, MemoryBytes: 64 << 20})
	cfg := Config{SeqLen: 63, BatchSize: 4, Seed: 5, LogicalShards: 8, EOS: 0, BOS: -1, Pad: 0,
		Epochs: 1, ShuffleWindow: 4, RunTokens: 65536, Datasets: []Dataset{remote}}
	rc, err := OpenCorpusWith(cfg, objectResources(t, store))
	if err != nil {
		t.Fatalf("opening %s: %v", remote.Path, err)
	}
	defer rc.Close()
	trips := map[int64]int{}
	for _, r := range proxy.Log() {
		if r.Method == "GET" && strings.HasSuffix(r.Path, ".idx") {
			trips[r.Answered]++
		}
	}
	t.Logf("%s: the open's GETs of the index, by requests answered before them: %v; %+v", remote.Path, trips, store.Stats())
	proxy.SetDelay(0)
	lcfg := cfg
	lcfg.Datasets = []Dataset{local}
	lc, err := OpenCorpusWith(lcfg, objectResources(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	lr, err := NewRank(lc, 0, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := NewRank(rc, 0, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want, got := run(t, lr, cfg, 3), run(t, rr, cfg, 3); !reflect.DeepEqual(got, want) {
		t.Fatalf("batches from %s differ from the local files'", remote.Path)
	}
	return len(trips)
}

// evenDocs is n documents of length tokens each, of distinct tokens.
func evenDocs(n, length int) [][]int32 {
	docs := make([][]int32, n)
	for i := range docs {
		docs[i] = make([]int32, length)
		for j := range docs[i] {
			docs[i][j] = int32(1 + i*length + j)
		}
	}
	return docs
}

// pairDocuments rewrites the Megatron index at path as one of documents
// of two sequences each: a shorter document index, so that its size no
// longer gives its sequence count (34 + 20N bytes).
func pairDocuments(t *testing.T, path string) {
	t.Helper()
	idx, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	sequences := le.Uint64(idx[18:]) // after the magic, version and dtype
	documents := sequences/2 + 1
	le.PutUint64(idx[26:], documents)
	at := megatronHeaderBytes + 12*sequences
	for d := range documents {
		le.PutUint64(idx[at+8*d:], min(2*d, sequences))
	}
	if err := os.WriteFile(path, idx[:at+8*documents], 0o644); err != nil {
		t.Fatal(err)
	}
}
