package objstore

import "path/filepath"

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
