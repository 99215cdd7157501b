// An open object's entry in the disk cache: its backing file, its journal,
// and the blocks kept from before, checked at their first read.

package objstore

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"slices"
	"time"

	"go.uber.org/zap"
)

// openEntryLocked makes the entry of o's version in the cache directory
// o's backing: the one kept from before, whose blocks whole are restored
// (stored: on disk, their CRC-32C checked at their first read), or a new
// one. A cold entry of another version of the object is removed.
func (s *Store) openEntryLocked(o *Object) (err error) {
	d := s.disk
	name := entryName(o.url, o.ver, d.bs)
	if _, ok := d.cold[name]; ok {
		s.used -= d.takeCold(name)
	} else if other, ok := d.byURL[o.url]; ok {
		s.used -= d.dropCold(other)
	}
	logPath, dataPath := d.path(name, ".log"), d.path(name, ".data")
	r, rerr := replay(logPath)
	if rerr == nil && !r.header.sameAs(o.url, o.ver, d.bs) {
		rerr = fmt.Errorf("%s: holds %s, not %s", logPath, r.header.URL, o.url)
	}
	if rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		s.opts.Logger.Warn("object disk cache: journal not used, the object is fetched again", zap.Error(rerr))
	}
	defer func() {
		if err != nil {
			o.closeEntry()
			d.remove(name)
		}
	}()
	if rerr != nil {
		d.remove(name)
		r = &replayed{header: headerOf(o.url, o.ver, d.bs), live: map[int64]uint32{}}
		o.journal, err = d.createJournal(logPath, r.header)
	} else {
		o.journal, err = d.reopenJournal(logPath, r)
	}
	if err != nil {
		return err
	}
	if o.file, err = os.OpenFile(dataPath, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return err
	}
	touch(logPath)
	o.entry = name
	d.live[name] = struct{}{}
	o.sums = make(map[int]uint32, len(r.live))
	for i, sum := range r.live {
		o.sums[int(i)] = sum
	}
	return nil
}

// restoreLocked puts the blocks o's entry kept from before in the cache,
// stored, in the LRU (they may be evicted before they are read).
func (s *Store) restoreLocked(o *Object) {
	for _, i := range slices.Sorted(maps.Keys(o.sums)) {
		b := o.blocks.at(i)
		b.state = stored
		o.present++
		b.elem = s.lru.PushBack(blockRef{obj: o, i: i})
		s.used += o.blockLen(i)
	}
	s.opts.Metrics.cached.Set(float64(s.used))
}

// checkStoredLocked makes stored block i present and holds it, for a read
// (verifyStoredLocked).
func (o *Object) checkStoredLocked(ctx context.Context, i int) error {
	s := o.store
	whole, err := o.verifyStoredLocked(ctx, i)
	if err != nil {
		return err
	}
	if o.freed {
		return fmt.Errorf("%w: %s: read after the dataset was closed", ErrObject, o.url)
	}
	ahead := o.blocks.get(i).ahead // queued by Prefetch, checked here first
	o.holdLocked(i)
	o.setAheadLocked(i, false)
	switch {
	case whole && ahead:
		s.opts.Metrics.ahead.Inc()
	case whole:
		s.opts.Metrics.hit.Inc()
	default:
		s.opts.Metrics.miss.Inc()
	}
	return nil
}

// verifyStoredLocked makes stored block i present: its bytes on disk are
// checked against the CRC-32C its journal gave, and fetched again when they
// differ (a crash while they were written, a disk that lost them); whole
// says they did not. Other reads of it wait as for a fetch. The bytes are
// read from the file, not the mapping, which a store closing meanwhile
// unmaps: that is an error, not a fault. Unheld, the block joins the LRU
// it belongs to.
func (o *Object) verifyStoredLocked(ctx context.Context, i int) (whole bool, err error) {
	s := o.store
	b := o.blocks.at(i)
	s.unlinkLocked(b)
	b.state = fetching
	r := &run{done: make(chan struct{})}
	o.runs[i] = r
	sum := o.sums[i]
	delete(o.sums, i)
	s.mu.Unlock()
	s.disk.step("check")
	whole, err = o.storedWhole(i, sum)
	if err == nil && !whole {
		// Not whole until its GET ends: a crash meanwhile must not
		// leave it listed.
		rec := record(int64(i), 0, true)
		o.journal.append(rec[:], 0, 1)
		err = o.fetch(ctx, i, i)
	}
	s.mu.Lock()
	o.finishLocked(i, i, r, err)
	if err != nil || o.freed {
		return whole, err
	}
	if b := o.blocks.at(i); b.state == present && b.holds == 0 && b.elem == nil {
		b.elem = s.lru.PushBack(blockRef{obj: o, i: i}) // one fetched ahead went to the other
	}
	return whole, nil
}

// storedWhole reports whether the bytes of block i in o's file have the
// CRC-32C sum. A file closed (the store closing) is an error; one that
// cannot be read otherwise holds no whole block.
func (o *Object) storedWhole(i int, sum uint32) (bool, error) {
	p := make([]byte, o.blockLen(i))
	if _, err := o.file.ReadAt(p, int64(i)*o.store.opts.BlockSize); errors.Is(err, os.ErrClosed) {
		return false, fmt.Errorf("%w: %s: read after the dataset was closed: %w", ErrObject, o.url, err)
	} else if err != nil {
		return false, nil
	}
	return crc32.Checksum(p, castagnoli) == sum, nil
}

// journalBlocks records blocks [i, j], just fetched, as whole in o's
// journal, with their CRC-32C. The bytes are read back from the file, not
// the mapping: a store closing meanwhile makes that an error, not a fault.
// A journal that cannot be written is removed (entryJournal.append): the
// blocks are read all the same, and fetched again after a restart.
func (o *Object) journalBlocks(i, j int) {
	if o.journal == nil {
		return
	}
	bs := o.store.opts.BlockSize
	buf := make([]byte, bs)
	recs := make([]byte, 0, (j-i+1)*recordLen)
	for k := i; k <= j; k++ {
		p := buf[:o.blockLen(k)]
		if _, err := o.file.ReadAt(p, int64(k)*bs); err != nil {
			return // closed: not recorded, fetched again after a restart
		}
		rec := record(int64(k), crc32.Checksum(p, castagnoli), false)
		recs = append(recs, rec[:]...)
	}
	o.journal.append(recs, j-i+1, 0)
}

// journalEvicted records block i as evicted, before its hole is punched:
// a crash between leaves bytes the next start punches out, never a block
// listed whole that is a hole.
func (o *Object) journalEvicted(i int) {
	if o.journal == nil || o.freed {
		return
	}
	delete(o.sums, i)
	o.store.disk.step("evict: to record")
	rec := record(int64(i), 0, true)
	o.journal.append(rec[:], 0, 1)
	o.store.disk.step("evict: recorded")
}

// releaseEntryLocked ends o's use of its entry when o is dropped: with
// blocks kept (bytes of them) it stays on disk, cold; a replaced object's,
// or an empty one, is removed. It returns the bytes of the cold entries
// added less those removed.
func (s *Store) releaseEntryLocked(o *Object, bytes int64) int64 {
	if o.entry == "" {
		return 0
	}
	d := s.disk
	name := o.entry
	o.entry = ""
	delete(d.live, name)
	journal, ok := o.journal.close()
	if o.replaced || bytes == 0 || !ok {
		d.remove(name)
		return 0
	}
	c := &coldEntry{name: name, url: o.url, bytes: bytes, journal: journal, used: time.Now()}
	return bytes - d.addCold(c)
}

// closeEntry closes o's journal (the field stays: a fetch ending
// meanwhile records nothing).
func (o *Object) closeEntry() {
	if o.journal != nil {
		o.journal.close()
	}
}
