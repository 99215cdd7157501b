package objstore_test

import (
	"bytes"
	"hash/crc32"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// journalSize is the length of the journal of entry.
func journalSize(t *testing.T, entry string) int64 {
	t.Helper()
	info, err := os.Stat(entry + ".log")
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

// journalsSize is the length of every journal in dir.
func journalsSize(t *testing.T, dir string) int64 {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var n int64
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		n += info.Size()
	}
	return n
}

// waitCompacted waits for o's journal to have no compaction asked for.
func waitCompacted(t *testing.T, o *objstore.Object) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for objstore.Compacting(o) {
		if time.Now().After(deadline) {
			t.Fatal("a compaction of the journal did not end")
		}
		time.Sleep(time.Millisecond)
	}
}

// cachedBlocks is the blocks of o the cache holds (present).
func cachedBlocks(o *objstore.Object) []int64 {
	var got []int64
	for k := int64(0); k*block < o.Size(); k++ {
		if o.HoldCached(k*block, 1) {
			o.Release(k*block, 1)
			got = append(got, k)
		}
	}
	return got
}

// TestDiskCacheJournalBounded: an object read at random through a cache of
// 4 blocks, each read fetching a block and evicting another, keeps a
// journal of a few records a block cached while the store runs (2 records
// a read without compaction: 19 KiB here): every 50 reads, once the
// compaction asked for (if any) is done, it holds at most twice the blocks
// cached plus CompactSlack records. At the end it replays to exactly the
// blocks cached, with their CRC-32C, and the journal gauge says its bytes.
func TestDiskCacheJournalBounded(t *testing.T) {
	dir := t.TempDir()
	const blocks, cached, reads = 64, 4, 600
	f := newFixture(t, blocks*block, objstore.Options{Dir: dir, DiskBytes: cached * block})
	o := f.open(t)
	entry := objstore.EntryOf(o)
	header := journalSize(t, entry)
	rng := rand.New(rand.NewSource(1))
	bound := header + objstore.JournalRecordLen*(2*cached+objstore.CompactSlack)
	for n := 1; n <= reads; n++ {
		k := rng.Int63n(blocks)
		if got := read(t, o, k*block, block); !bytes.Equal(got, f.data[k*block:(k+1)*block]) {
			t.Fatalf("block %d differs", k)
		}
		if n%50 == 0 {
			waitCompacted(t, o)
			if size := journalSize(t, entry); size > bound {
				t.Fatalf("after %d reads the journal holds %d bytes, want at most %d (header %d)", n, size, bound, header)
			}
		}
	}
	if st := f.store.Stats(); st.Evictions < reads/2 {
		t.Fatalf("want the reads to evict blocks all along: %+v", st)
	}
	waitCompacted(t, o)
	live, records, err := objstore.ReplayJournal(entry + ".log")
	if err != nil {
		t.Fatal(err)
	}
	if records > 2*len(live)+objstore.CompactSlack {
		t.Fatalf("once compacted, the journal holds %d records for %d blocks", records, len(live))
	}
	want := cachedBlocks(o)
	if got := slices.Sorted(func(yield func(int64) bool) {
		for k := range live {
			if !yield(k) {
				return
			}
		}
	}); !slices.Equal(got, want) {
		t.Fatalf("the journal lists blocks %v, the cache holds %v", got, want)
	}
	for k, sum := range live {
		if crc32.Checksum(f.data[k*block:(k+1)*block], crc32.MakeTable(crc32.Castagnoli)) != sum {
			t.Fatalf("block %d's record has another CRC-32C than its bytes", k)
		}
	}
	if st, n := f.store.Stats(), journalsSize(t, dir); st.JournalBytes != n {
		t.Fatalf("the journal gauge says %d bytes, the journals hold %d", st.JournalBytes, n)
	}
}

// copyDir copies the files of dir (its lock aside) to a new directory: what
// a crash at this moment would leave.
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	to := t.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "lock" {
			continue
		}
		in, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(to, e.Name()))
		if err == nil {
			_, err = io.Copy(out, in)
		}
		in.Close()
		if err != nil || out.Close() != nil {
			t.Fatal(err)
		}
	}
	return to
}

// checkCrashed checks what a crash left in dir of the object data: its
// journal lists only blocks whose bytes in the data file are the object's;
// and a store opened on it removes what the compaction left, serves the
// object's bytes and fetches only the blocks not listed.
func checkCrashed(t *testing.T, f *fixture, dir string) map[int64]uint32 {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) != 1 {
		t.Fatalf("journals after the crash: %v", logs)
	}
	live, _, err := objstore.ReplayJournal(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	disk, err := os.ReadFile(strings.TrimSuffix(logs[0], ".log") + ".data")
	if err != nil {
		t.Fatal(err)
	}
	for k := range live {
		if !bytes.Equal(disk[k*block:(k+1)*block], f.data[k*block:(k+1)*block]) {
			t.Fatalf("the journal lists block %d, whose bytes on disk are not the object's", k)
		}
	}
	s := diskStore(t, dir, 64*block)
	if tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmps) != 0 {
		t.Fatalf("the compaction's file is left after the start: %v", tmps)
	}
	if got, _ := readAll(t, s, f.loc); !bytes.Equal(got, f.data) {
		t.Fatal("after the crash the object's bytes differ")
	}
	if st := s.Stats(); st.FetchedBytes != int64(len(f.data))-int64(len(live))*block {
		t.Fatalf("after the crash, with %d blocks listed, fetched %d bytes", len(live), st.FetchedBytes)
	}
	return live
}

// TestDiskCacheCompactionCrash: a crash at each step of a journal's
// compaction while the store runs (its files copied while the compaction
// stops there, records appended meanwhile) leaves a journal that lists
// exactly the blocks cached, each with the object's bytes on disk.
func TestDiskCacheCompactionCrash(t *testing.T) {
	for _, crashAt := range []string{"compact: written", "compact: renamed"} {
		t.Run(strings.TrimPrefix(crashAt, "compact: "), func(t *testing.T) {
			dir := t.TempDir()
			f := newFixture(t, 32*block, objstore.Options{Dir: dir, DiskBytes: 4 * block})
			at, resume := make(chan string), make(chan struct{})
			var on atomic.Bool
			on.Store(true)
			objstore.SetDiskHook(f.store, func(step string) {
				if strings.HasPrefix(step, "compact") && on.Load() {
					at <- step
					<-resume
				}
			})
			o := f.open(t)
			rng := rand.New(rand.NewSource(2))
			readSome := func(n int) {
				for range n {
					k := rng.Int63n(32)
					read(t, o, k*block, block)
				}
			}
			var crashed string
			for n, step := 0, ""; step != "compact: written"; n++ {
				if n == 2000 {
					t.Fatal("2000 reads of a 4-block cache, and no compaction of the journal")
				}
				readSome(1)
				select {
				case step = <-at:
				default:
				}
			}
			readSome(10) // records the compaction must carry over
			if crashAt == "compact: written" {
				crashed = copyDir(t, dir)
			}
			resume <- struct{}{}
			if step := <-at; step != "compact: renamed" {
				t.Fatalf("step %q after the new journal was written", step)
			}
			if crashAt == "compact: renamed" {
				crashed = copyDir(t, dir)
			}
			on.Store(false)
			resume <- struct{}{}
			want := cachedBlocks(o)
			live := checkCrashed(t, f, crashed)
			if len(live) != len(want) {
				t.Fatalf("after the crash the journal lists %d blocks, the cache held %v", len(live), want)
			}
			for _, k := range want {
				if _, ok := live[k]; !ok {
					t.Fatalf("after the crash the journal lacks block %d, cached", k)
				}
			}
		})
	}
}

// TestDiskCacheEvictionCrash: a crash at each step of an eviction (its
// files copied there) leaves a journal that lists only blocks whose bytes
// are on disk: the eviction is recorded before the block's hole is
// punched.
func TestDiskCacheEvictionCrash(t *testing.T) {
	for _, crashAt := range []string{"evict: to record", "evict: recorded"} {
		t.Run(strings.TrimPrefix(crashAt, "evict: "), func(t *testing.T) {
			dir := t.TempDir()
			f := newFixture(t, 8*block, objstore.Options{Dir: dir, DiskBytes: 2 * block})
			var crashed string
			objstore.SetDiskHook(f.store, func(step string) {
				if step == crashAt && crashed == "" { // under the store's lock: one at a time
					crashed = copyDir(t, dir)
				}
			})
			o := f.open(t)
			for k := int64(0); k < 8; k++ {
				read(t, o, k*block, block)
			}
			if crashed == "" {
				t.Fatal("8 blocks read through a 2-block cache, and no eviction")
			}
			checkCrashed(t, f, crashed)
		})
	}
}

// TestDiskCacheJournalWriteFails: a journal that cannot be written is
// removed (records lost could leave an eviction unsaid): the reads go on,
// and after a restart the object is fetched again, whole and right.
func TestDiskCacheJournalWriteFails(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, 8*block, objstore.Options{Dir: dir, DiskBytes: 4 * block})
	o := f.open(t)
	entry := objstore.EntryOf(o)
	read(t, o, 0, 2*block)
	objstore.BreakJournal(o)
	for k := int64(0); k < 8; k++ {
		if got := read(t, o, k*block, block); !bytes.Equal(got, f.data[k*block:(k+1)*block]) {
			t.Fatalf("block %d differs after its journal failed", k)
		}
	}
	if _, err := os.Stat(entry + ".log"); !os.IsNotExist(err) {
		t.Fatalf("the journal that failed is left: %v", err)
	}
	if st := f.store.Stats(); st.JournalBytes != 0 {
		t.Fatalf("the journal gauge after the journal was removed: %+v", st)
	}
	o.Close()
	f.store.Close()
	s := diskStore(t, dir, 64*block)
	if got, _ := readAll(t, s, f.loc); !bytes.Equal(got, f.data) {
		t.Fatal("after a restart the object differs")
	}
	if st := s.Stats(); st.FetchedBytes != 8*block {
		t.Fatalf("want the object fetched again whole: %+v", st)
	}
}
