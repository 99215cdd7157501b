package stream

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
)

// TestObjectsLyingStore: datasets of every format read through a store
// that lies (a proxy in front of the real server) give, batch by batch,
// the batches of the local copy until a read fails with an error naming the
// object; never a batch that differs. A store that ignored Range or answered
// another range gave batches that differed from the local copy, 40 of 40;
// one without ETags served a replaced object's new version; one reporting
// a 2^50-byte object killed the daemon.
func TestObjectsLyingStore(t *testing.T) {
	srv := s3test.Start(t)
	rng := rand.New(rand.NewSource(11))
	oc := newObjectCorpus(t, srv, "lies", rng)
	// A new version of the JSONL file (read in blocks): its lines in the
	// other order, as long, newer.
	b, err := os.ReadFile(filepath.Join(oc.dir, "plain", "x.jsonl"))
	if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
		t.Fatalf("plain/x.jsonl: %v", err)
	}
	lines := bytes.Split(b[:len(b)-1], []byte("\n"))
	slices.Reverse(lines)
	srv.Put(t, "lies", "corpus/plain/v2.jsonl", append(bytes.Join(lines, []byte("\n")), '\n'))
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(srv.Dir, "lies", "corpus", "plain", "x.jsonl"), old, old); err != nil {
		t.Fatal(err)
	}
	proxy := s3test.NewLyingProxy(t, srv)
	cfg := objectConfig(t, rng, oc.remote)
	lcfg := cfg
	lcfg.Datasets = oc.local
	flat, plain, v2 := "lies/corpus/flat/x.bin", "lies/corpus/plain/x.jsonl", "lies/corpus/plain/v2.jsonl"
	for _, c := range []struct {
		name       string
		open, read s3test.Lies
		kind       error
	}{
		{"range ignored", s3test.Lies{}, s3test.Lies{IgnoreRange: true}, objstore.ErrUnavailable},
		{"another range", s3test.Lies{}, s3test.Lies{ShiftRange: 4 << 10}, objstore.ErrUnavailable},
		{"a byte further", s3test.Lies{}, s3test.Lies{ShiftRange: 1}, objstore.ErrUnavailable},
		{"replaced, no ETags", s3test.Lies{StripETag: true},
			s3test.Lies{StripETag: true, IgnoreConditions: true, Replaced: map[string]string{plain: v2}}, objstore.ErrChanged},
		{"replaced, If-Match ignored", s3test.Lies{},
			s3test.Lies{IgnoreConditions: true, Replaced: map[string]string{plain: v2}}, objstore.ErrChanged},
		{"size of 2^50", s3test.Lies{Sizes: map[string]int64{flat: 1 << 50}}, s3test.Lies{}, objstore.ErrBadAnswer},
	} {
		t.Run(c.name, func(t *testing.T) {
			proxy.SetLies(c.open)
			// A cache of 4 blocks: reads keep going to the store.
			store := newStore(t, srv, proxy.URL, objstore.Options{BlockSize: 4 << 10, MemoryBytes: 16 << 10, RetryFor: 300 * time.Millisecond})
			remote, err := OpenCorpusWith(cfg, objectResources(t, store))
			if err != nil {
				wantObjectError(t, "open", err, c.kind)
				return
			}
			defer remote.Close()
			if c.kind == objstore.ErrBadAnswer {
				t.Fatal("a corpus with an object of 2^50 bytes opened")
			}
			lc, err := OpenCorpusWith(lcfg, objectResources(t, nil))
			if err != nil {
				t.Fatal(err)
			}
			defer lc.Close()
			proxy.SetLies(c.read)
			defer proxy.SetLies(s3test.Lies{})
			lr, err := NewRank(lc, 0, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			rr, err := NewRank(remote, 0, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, got := batchBuf(cfg), batchBuf(cfg)
			for i := 0; ; i++ {
				wp, err := lr.NextBatch(want)
				if err != nil {
					t.Fatal(err)
				}
				gp, err := rr.NextBatch(got)
				if err != nil {
					wantObjectError(t, fmt.Sprintf("batch %d", i), err, c.kind)
					return
				}
				if wp.Lines == 0 {
					t.Fatalf("the whole epoch (%d batches) was served through a lying store", i)
				}
				if gp.Lines != wp.Lines || !slices.Equal(got, want) {
					t.Fatalf("batch %d from the lying store differs from the local copy's (%d lines, local %d)", i, gp.Lines, wp.Lines)
				}
			}
		})
	}
}

// wantObjectError fails unless err is an object storage error of kind that
// names an object of the corpus.
func wantObjectError(t *testing.T, what string, err error, kind error) {
	t.Helper()
	if !errors.Is(err, objstore.ErrObject) || !errors.Is(err, kind) || !strings.Contains(err.Error(), "s3://lies/corpus/") {
		t.Fatalf("%s: got %v, want an object storage error (%v) naming the object", what, err, kind)
	}
	t.Logf("%s: %v", what, err)
}
