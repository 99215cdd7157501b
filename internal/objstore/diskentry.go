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
	if c := d.cold[name]; c != nil {
		delete(d.cold, name)
		delete(d.byURL, c.url)
		s.used -= c.bytes
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
		if o.journal, err = os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600); err != nil {
			return err
		}
		if err = writeHeader(o.journal, r.header); err != nil {
			return err
		}
	} else {
		// Appends go after the last whole record: a torn one's bytes go.
		if err = os.Truncate(logPath, r.end); err != nil {
			return err
		}
		if o.journal, err = os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0); err != nil {
			return err
		}
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

// checkStoredLocked makes stored block i present and holds it: its bytes on
// disk are checked against the CRC-32C its journal gave, and fetched again
// when they differ (a crash while they were written, a disk that lost
// them). Other reads of it wait as for a fetch.
func (o *Object) checkStoredLocked(ctx context.Context, i int) error {
	s := o.store
	b := o.blocks.at(i)
	s.unlinkLocked(b)
	b.state = fetching
	r := &run{done: make(chan struct{})}
	o.runs[i] = r
	sum := o.sums[i]
	delete(o.sums, i)
	off := int64(i) * s.opts.BlockSize
	bytes := o.data[off : off+o.blockLen(i)]
	s.mu.Unlock()
	whole := crc32.Checksum(bytes, castagnoli) == sum
	var err error
	if !whole { // the GET writes every byte of it
		err = o.fetch(ctx, i, i)
	}
	s.mu.Lock()
	o.finishLocked(i, i, r, err)
	if err != nil {
		return err
	}
	if o.freed {
		return fmt.Errorf("%w: %s: read after the dataset was closed", ErrObject, o.url)
	}
	o.holdLocked(i)
	if whole {
		s.opts.Metrics.hit.Inc()
	} else {
		s.opts.Metrics.miss.Inc()
	}
	return nil
}

// journalBlocks records blocks [i, j], just fetched, as whole in o's
// journal, with their CRC-32C. The bytes are read back from the file, not
// the mapping: a store closing meanwhile makes that an error, not a fault.
// A journal that cannot be written is logged (once): the blocks are read
// all the same, and fetched again after a restart.
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
	if _, err := o.journal.Write(recs); err != nil {
		o.store.journalFailed(o, err)
	}
}

// journalEvicted records block i as evicted.
func (o *Object) journalEvicted(i int) {
	if o.journal == nil || o.freed {
		return
	}
	delete(o.sums, i)
	rec := record(int64(i), 0, true)
	if _, err := o.journal.Write(rec[:]); err != nil {
		o.store.journalFailed(o, err)
	}
}

// journalFailed logs, once, that a journal cannot be written.
func (s *Store) journalFailed(o *Object, err error) {
	s.journalOnce.Do(func() {
		s.opts.Logger.Warn("object disk cache: a journal cannot be written: its blocks will be fetched again after a restart",
			zap.String("object", o.url), zap.String("dir", s.opts.Dir), zap.Error(err))
	})
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
	if o.replaced || bytes == 0 {
		d.remove(name)
		return 0
	}
	c := &coldEntry{name: name, url: o.url, bytes: bytes, used: time.Now()}
	return bytes - d.addCold(c)
}

// closeEntry closes o's journal (the field stays: a fetch ending
// meanwhile gets an error from it, and nothing is recorded).
func (o *Object) closeEntry() {
	if o.journal != nil {
		o.journal.Close()
	}
}
