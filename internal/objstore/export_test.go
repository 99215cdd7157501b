package objstore

import (
	"time"

	"golang.org/x/sys/unix"
)

// ChunksOf counts the chunks of o's block table that are made.
func ChunksOf(o *Object) int {
	o.store.mu.Lock()
	defer o.store.mu.Unlock()
	return o.blocks.chunksMade()
}

// ListedOf is how many objects s remembers from listings and HEADs, and
// the bytes of their keys and ETags.
func ListedOf(s *Store) (int, int64) { return s.listed.size() }

// SetListedFor makes what s lists stand for a HEAD for d; before any List.
func SetListedFor(s *Store, d time.Duration) { s.listed.ttl = d }

// WaitingOn counts the reads of o waiting for another's fetch.
func WaitingOn(o *Object) int {
	o.store.mu.Lock()
	defer o.store.mu.Unlock()
	return o.waiting
}

// CopyBuffersOut counts the GETs' copy buffers in use.
func CopyBuffersOut() int64 { return copyBuffersOut.Load() }

// BackingBytes is the memory or disk the object's backing file holds.
func BackingBytes(o *Object) int64 {
	var st unix.Stat_t
	if err := unix.Fstat(int(o.file.Fd()), &st); err != nil {
		return -1
	}
	return st.Blocks * 512
}
