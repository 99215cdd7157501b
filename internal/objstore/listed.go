package objstore

import (
	"sync"
	"time"
)

// listedFor is how long a listing stands in for a HEAD request: long enough
// for the opening of the dataset that listed it.
const listedFor = time.Minute

// listed is what the latest listings (and HEADs) said of each object, so
// that opening a dataset just listed makes no HEAD request per object. It
// holds at most what one listing may (maxEntries objects, maxBytes bytes of
// keys and ETags): past either, the oldest entries go first. An entry goes
// ttl after it came, by a timer, whether or not anything is listed again.
// Its methods are safe for concurrent use.
type listed struct {
	mu         sync.Mutex
	maxEntries int
	maxBytes   int64
	ttl        time.Duration

	entries map[Location]listing
	// order is every entry made, oldest first; an entry replaced since
	// (another seq) is skipped when its turn comes. It counts against
	// maxEntries, so it is bounded too.
	order []listedRef
	bytes int64 // of the keys and ETags of entries
	seq   uint64
	timer *time.Timer // set while entries has any
}

// listing is an object's description from a listing, and when it was made.
type listing struct {
	info   Info
	at     time.Time
	headed bool // from a HEAD request
	seq    uint64
}

// listedRef names an entry of listed in its order.
type listedRef struct {
	loc Location
	seq uint64
}

func newListed(maxEntries int, maxBytes int64) *listed {
	return &listed{maxEntries: maxEntries, maxBytes: maxBytes, ttl: listedFor, entries: map[Location]listing{}}
}

// entryBytes is what an entry counts against maxBytes.
func entryBytes(info Info) int64 { return int64(len(info.Key) + len(info.ETag)) }

// get is what was said of loc within the last ttl.
func (l *listed) get(loc Location) (listing, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[loc]
	if !ok || time.Since(e.at) > l.ttl {
		return listing{}, false
	}
	return e, true
}

// put remembers infos, the objects of bucket a listing gave (or a HEAD:
// headed), making room by forgetting the oldest.
func (l *listed) put(bucket string, infos []Info, headed bool) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked(now)
	for _, info := range infos {
		loc := Location{Bucket: bucket, Key: info.Key}
		if old, ok := l.entries[loc]; ok {
			l.bytes -= entryBytes(old.info)
		}
		l.seq++
		l.entries[loc] = listing{info: info, at: now, headed: headed, seq: l.seq}
		l.order = append(l.order, listedRef{loc: loc, seq: l.seq})
		l.bytes += entryBytes(info)
		for len(l.order) > l.maxEntries || l.bytes > l.maxBytes {
			l.popLocked()
		}
	}
	if l.timer == nil && len(l.entries) > 0 {
		l.timer = time.AfterFunc(l.ttl, l.tick)
	}
}

// popLocked forgets the oldest entry (or skips a reference to one replaced
// since).
func (l *listed) popLocked() {
	ref := l.order[0]
	l.order[0] = listedRef{}
	l.order = l.order[1:]
	if len(l.order) == 0 {
		l.order = nil // let a large listing's array go
	}
	if e, ok := l.entries[ref.loc]; ok && e.seq == ref.seq {
		delete(l.entries, ref.loc)
		l.bytes -= entryBytes(e.info)
	}
}

// expireLocked forgets the entries older than ttl at now.
func (l *listed) expireLocked(now time.Time) {
	for len(l.order) > 0 {
		e, ok := l.entries[l.order[0].loc]
		if ok && e.seq == l.order[0].seq && now.Sub(e.at) <= l.ttl {
			return
		}
		l.popLocked()
	}
}

// tick is the timer's: it forgets what expired and waits for the oldest
// entry left.
func (l *listed) tick() {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer == nil { // closed
		return
	}
	l.expireLocked(now)
	if len(l.order) == 0 {
		l.timer = nil
		return
	}
	oldest := l.entries[l.order[0].loc].at
	l.timer.Reset(max(oldest.Add(l.ttl).Sub(now), time.Millisecond))
}

// close forgets everything and stops the timer.
func (l *listed) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.entries, l.order, l.bytes = map[Location]listing{}, nil, 0
}

// size is how many entries are held, and their bytes.
func (l *listed) size() (int, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries), l.bytes
}
