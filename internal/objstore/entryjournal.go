// An open object's journal: appended to as its blocks are fetched and
// evicted, and compacted while the daemon runs, so that it stays within a
// small multiple of the blocks it lists.

package objstore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"go.uber.org/zap"
)

// compactSlack is the records a journal may hold beyond twice its blocks
// whole before it is compacted: a journal takes at most 32 bytes a block
// kept, and 512 bytes and its header an entry (a compaction under way
// aside).
const compactSlack = 32

// errJournalClosed ends a compaction whose journal closed meanwhile.
var errJournalClosed = errors.New("journal closed")

// entryJournal is the journal of an open object's entry. Appends come from
// fetches (outside the store's lock) and evictions (under it); a
// compaction rewrites the journal beside them, taking mu only to swap the
// files, never while it syncs.
type entryJournal struct {
	d      *diskCache
	path   string
	header journalHeader

	mu      sync.Mutex
	f       *os.File
	size    int64 // bytes of f: the header and whole records
	records int
	live    int  // blocks the records say whole
	queued  bool // a compaction is asked for or under way
	// askAt, after a compaction failed, is the records past which the next
	// is asked for: twice those then, so that a full disk is not tried at
	// every append.
	askAt  int
	closed bool // the object dropped, or the store closed
	failed bool // a write failed: the journal is removed
}

// createJournal starts the journal at path afresh: its header alone.
func (d *diskCache) createJournal(path string, h journalHeader) (*entryJournal, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cw := &countingWriter{w: f}
	if err := writeHeader(cw, h); err != nil {
		f.Close()
		return nil, err
	}
	return d.openedJournal(path, f, &replayed{header: h, live: map[int64]uint32{}, end: cw.n}), nil
}

// reopenJournal goes on with the journal at path, which replays to r:
// appends go after its last whole record (a torn one's bytes go).
func (d *diskCache) reopenJournal(path string, r *replayed) (*entryJournal, error) {
	if err := os.Truncate(path, r.end); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, err
	}
	return d.openedJournal(path, f, r), nil
}

func (d *diskCache) openedJournal(path string, f *os.File, r *replayed) *entryJournal {
	d.metrics.journal.Add(float64(r.end))
	return &entryJournal{d: d, path: path, header: r.header, f: f, size: r.end, records: r.records, live: len(r.live)}
}

// append writes records (of whole blocks, less those evicted, to the
// count of blocks whole) and asks for a compaction once they pass twice
// the blocks whole and compactSlack. A closed journal takes none. A write
// that fails removes the journal: records lost would let it list a block
// evicted since, so none is better.
func (j *entryJournal) append(recs []byte, whole, evicted int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed || j.failed {
		return
	}
	n, err := j.f.Write(recs)
	j.size += int64(n)
	j.d.metrics.journal.Add(float64(n))
	if err != nil {
		j.failLocked(err)
		return
	}
	j.records += len(recs) / recordLen
	j.live += whole - evicted
	j.askLocked()
}

// askLocked asks the store's compactor for a compaction once the records
// pass twice the blocks whole and compactSlack.
func (j *entryJournal) askLocked() {
	if j.queued || j.records <= 2*j.live+compactSlack || j.records < j.askAt {
		return
	}
	select {
	case j.d.compactions <- j:
		j.queued = true
	default: // the compactor is behind: the next append asks again
	}
}

// failLocked removes the journal after a failed write (its entry's blocks
// are fetched again after a restart) and logs it, once per store.
func (j *entryJournal) failLocked(err error) {
	j.failed = true
	j.f.Close()
	rmErr := os.Remove(j.path)
	j.d.metrics.journal.Add(-float64(j.size))
	j.d.failOnce.Do(func() {
		j.d.log.Warn("object disk cache: a journal cannot be written: it is removed, its blocks will be fetched again after a restart",
			zap.String("journal", j.path), zap.Error(err), zap.NamedError("remove", rmErr))
	})
}

// close ends the journal's use: no record is appended after it. It returns
// the journal's bytes, and false when the journal was removed (a write
// failed).
func (j *entryJournal) close() (int64, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.failed {
		return 0, false
	}
	if !j.closed {
		j.closed = true
		j.f.Close()
		j.d.metrics.journal.Add(-float64(j.size))
	}
	return j.size, true
}

// compact rewrites the journal with one record per block whole, in steps a
// crash may stop at any point, each leaving a journal that replays as the
// one it replaces:
//  1. the journal's whole records so far are replayed and the blocks whole
//     written to a new file beside it (NAME.log.*.tmp), which is synced;
//  2. under mu, the records appended meanwhile are copied after them and
//     the new file renamed over the journal; it takes the appends;
//  3. the directory is synced.
//
// Before the rename the journal is untouched and the new file is removed at
// the next start; after it, the new file replays to what the old did.
func (j *entryJournal) compact() error {
	j.mu.Lock()
	upTo, stop := j.size, j.closed || j.failed
	j.mu.Unlock()
	if stop {
		return nil
	}
	r, err := replayTo(j.path, upTo)
	if err == nil && r.end != upTo {
		err = fmt.Errorf("%s: replays to byte %d of %d", j.path, r.end, upTo)
	}
	var tmp *os.File
	if err == nil {
		tmp, err = os.CreateTemp(filepath.Dir(j.path), filepath.Base(j.path)+".*.tmp")
	}
	if err != nil {
		j.endCompaction(true)
		return err
	}
	n, err := writeLive(tmp, r)
	if err == nil {
		err = tmp.Sync()
	}
	j.d.step("compact: written")
	if err == nil {
		err = j.swap(tmp, r, upTo, n)
	}
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		j.endCompaction(true)
		if errors.Is(err, errJournalClosed) {
			return nil // its object was dropped meanwhile
		}
		return err
	}
	j.d.step("compact: renamed")
	return syncDir(j.path)
}

// swap is compact's step 2: the records appended since byte upTo go after
// the n bytes tmp holds, and tmp becomes the journal.
func (j *entryJournal) swap(tmp *os.File, r *replayed, upTo, n int64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.queued = false
	if j.closed || j.failed {
		return errJournalClosed
	}
	tail := make([]byte, j.size-upTo)
	if err := readAt(j.path, tail, upTo); err != nil {
		return err
	}
	records := len(r.live) + len(tail)/recordLen // one a block whole, then the tail
	for k := 0; k+recordLen <= len(tail); k += recordLen {
		if !r.apply(tail[k : k+recordLen]) {
			return fmt.Errorf("%s: a record at byte %d that does not replay", j.path, upTo+int64(k))
		}
	}
	if _, err := tmp.Write(tail); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), j.path); err != nil {
		return err
	}
	j.f.Close()
	j.f = tmp // written in order from here: only appends, under mu
	size := n + int64(len(tail))
	j.d.metrics.journal.Add(float64(size - j.size))
	j.size, j.records, j.live, j.askAt = size, records, len(r.live), 0
	j.askLocked() // the records appended meanwhile may call for another
	return nil
}

// endCompaction lets the journal ask for a compaction again; after one
// that failed, once its records double.
func (j *entryJournal) endCompaction(failed bool) {
	j.mu.Lock()
	j.queued = false
	if failed {
		j.askAt = 2 * j.records
	}
	j.mu.Unlock()
}

// readAt reads len(p) bytes of the file at path from off.
func readAt(path string, p []byte, off int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.ReadAt(p, off)
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// compactJournals is the store's compactor of journals, one at a time.
func (s *Store) compactJournals() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case j := <-s.disk.compactions:
			if err := j.compact(); err != nil {
				s.opts.Logger.Warn("object disk cache: compacting a journal", zap.String("journal", j.path), zap.Error(err))
			}
		}
	}
}
