package objstore

import (
	"maps"
	"path/filepath"
)

// EntryOf is the path of o's entry in the disk cache, less ".data" or
// ".log"; "" in memory.
func EntryOf(o *Object) string {
	o.store.mu.Lock()
	defer o.store.mu.Unlock()
	if o.entry == "" {
		return ""
	}
	return filepath.Join(o.store.opts.Dir, o.entry)
}

// SetDiskHook makes fn be called at each step of s's journal compactions
// ("compact: written", "compact: renamed"), of its evictions ("evict: to
// record", "evict: recorded", under the store's lock) and of its stored
// blocks' checks ("check"), where it may stop them; nil removes it.
func SetDiskHook(s *Store, fn func(step string)) {
	if fn == nil {
		s.disk.hook.Store(nil)
		return
	}
	s.disk.hook.Store(&fn)
}

// Compacting reports whether o's journal has a compaction asked for or
// under way.
func Compacting(o *Object) bool {
	o.store.mu.Lock()
	j := o.journal
	o.store.mu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.queued
}

// ReplayJournal is what the journal at path says: the CRC-32C of each
// block whole, and how many records it holds.
func ReplayJournal(path string) (map[int64]uint32, int, error) {
	r, err := replay(path)
	if err != nil {
		return nil, 0, err
	}
	return maps.Clone(r.live), r.records, nil
}

// JournalRecordLen is the bytes of one record; CompactSlack the records a
// journal may hold beyond twice its blocks whole.
const JournalRecordLen, CompactSlack = recordLen, compactSlack

// BreakJournal closes the file of o's journal under it, so that its next
// write fails.
func BreakJournal(o *Object) {
	o.store.mu.Lock()
	j := o.journal
	o.store.mu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.f.Close()
}
