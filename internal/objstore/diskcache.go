// The disk cache (--object-cache-dir), kept across restarts: each object
// version's blocks in a sparse file, beside a journal of the blocks whole
// in it; a lock on the directory.

package objstore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
)

// ErrCacheInUse: another daemon (or store) holds the cache directory's lock.
var ErrCacheInUse = errkind.New(errkind.Invalid, "object cache directory in use")

// lockName is the lock file in the cache directory; it holds the pid of
// the daemon that holds it.
const lockName = "lock"

// diskCache is the cache directory: the entries of objects no open object
// uses (cold), oldest used first out when room is needed. An entry is
// <name>.data, the object's bytes at their offsets (sparse), and
// <name>.log, its journal. Guarded by the store's mutex.
type diskCache struct {
	dir   string
	bs    int64
	lock  *os.File
	cold  map[string]*coldEntry // by name
	byURL map[string]string     // a cold entry's name by its object's URL
	// live holds the names of the entries open objects use: one object at
	// a time (an object replaced, then put back with the same ETag while
	// the first is still open, gets a file of its own, not kept).
	live map[string]struct{}
	log  *zap.Logger
	// compactions are the journals of open objects to compact, for the
	// store's compactor (entryjournal.go).
	compactions chan *entryJournal
	metrics     *Metrics
	failOnce    sync.Once
	// hook, in tests, is called at each step of a compaction and of a
	// stored block's check, to stop there.
	hook atomic.Pointer[func(step string)]
}

// step calls the test's hook at a named step.
func (d *diskCache) step(name string) {
	if fn := d.hook.Load(); fn != nil {
		(*fn)(name)
	}
}

// coldEntry is an entry on disk that no open object uses.
type coldEntry struct {
	name, url string
	bytes     int64 // of its blocks whole
	journal   int64 // bytes of its journal
	used      time.Time
}

// entryName names an object version's entry: a hash of the URL, the
// version and the block size, so that another version is another entry.
func entryName(url string, v version, bs int64) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%s\x00%d\x00%d", url, v.size, v.etag, v.modified.Unix(), bs))
	return hex.EncodeToString(h[:16])
}

// inUse reports whether an open object uses the entry of url's version v.
func (d *diskCache) inUse(url string, v version) bool {
	_, ok := d.live[entryName(url, v, d.bs)]
	return ok
}

func (d *diskCache) path(name, ext string) string { return filepath.Join(d.dir, name+ext) }

// openDiskCache locks dir and reads what it holds: each entry's journal is
// replayed, what a crash left in its data file outside the blocks whole is
// given back, and entries past budget are removed, oldest used first. It
// returns the bytes kept.
func openDiskCache(dir string, bs, budget int64, log *zap.Logger, m *Metrics) (*diskCache, int64, error) {
	lock, err := lockDir(dir)
	if err != nil {
		return nil, 0, err
	}
	d := &diskCache{dir: dir, bs: bs, lock: lock, cold: map[string]*coldEntry{}, byURL: map[string]string{},
		live: map[string]struct{}{}, log: log, compactions: make(chan *entryJournal, 64), metrics: m}
	names, err := os.ReadDir(dir)
	if err != nil {
		d.close()
		return nil, 0, fmt.Errorf("object cache dir %q: %w", dir, err)
	}
	for _, e := range names {
		name, ext, _ := strings.Cut(e.Name(), ".")
		switch {
		case ext == "log":
			d.load(name)
		case ext == "data":
			if _, err := os.Stat(d.path(name, ".log")); errors.Is(err, os.ErrNotExist) {
				os.Remove(d.path(name, ".data")) // its journal went first
			}
		case strings.HasSuffix(ext, ".tmp") || strings.HasPrefix(name, "object-"):
			// A journal's rewrite, or an unversioned object's file, left by a crash.
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	var total int64
	for _, c := range d.cold {
		total += c.bytes
	}
	kept := len(d.cold)
	for total > budget && len(d.cold) > 0 {
		total -= d.evictOldest()
	}
	log.Info("object disk cache opened", zap.String("dir", dir), zap.Int("objects", len(d.cold)), zap.Int64("bytes", total),
		zap.Int("removed_to_fit", kept-len(d.cold)), zap.Int64("budget", budget))
	return d, total, nil
}

// lockDir takes the directory's lock, or says who holds it. A lock ends
// with its process, however it ends (flock): no stale lock to clean.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("object cache dir %q: lock: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %q is held by another daemon (pid %s, %s): give each daemon its own --object-cache-dir",
				ErrCacheInUse, dir, strings.TrimSpace(string(pid)), path)
		}
		return nil, fmt.Errorf("object cache dir %q: lock %s: %w", dir, path, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt(fmt.Appendf(nil, "%d\n", os.Getpid()), 0)
	}
	return f, nil
}

// load reads entry name at start: its journal replayed (and compacted when
// mostly evictions), the rest of its data file given back. An entry that
// cannot be read, or holds no block, is removed.
func (d *diskCache) load(name string) {
	logPath, dataPath := d.path(name, ".log"), d.path(name, ".data")
	r, err := replay(logPath)
	var info os.FileInfo
	if err == nil {
		info, err = os.Stat(logPath)
	}
	if err == nil && r.header.Block != d.bs {
		err = fmt.Errorf("blocks of %d bytes, not %d", r.header.Block, d.bs)
	}
	if err == nil && len(r.live) == 0 {
		d.remove(name) // every block evicted, or none written
		return
	}
	if err == nil {
		_, err = os.Stat(dataPath)
	}
	if err == nil {
		if terr := trimData(dataPath, r); terr != nil { // never read unchecked all the same
			d.log.Warn("object disk cache: giving back what a crash left", zap.String("file", dataPath), zap.Error(terr))
		}
	}
	if err == nil && r.records > 2*len(r.live)+compactSlack {
		if err = rewrite(logPath, r); err == nil {
			os.Chtimes(logPath, info.ModTime(), info.ModTime()) // when it was used, not compacted
		}
	} else if err == nil && r.end < info.Size() {
		err = os.Truncate(logPath, r.end) // a torn record: the next go after the whole ones
	}
	var after os.FileInfo
	if err == nil {
		after, err = os.Stat(logPath)
	}
	if err != nil {
		d.log.Warn("object disk cache: entry removed", zap.String("journal", logPath), zap.Error(err))
		d.remove(name)
		return
	}
	d.addCold(&coldEntry{name: name, url: r.header.URL, bytes: r.liveBytes(), journal: after.Size(), used: info.ModTime()})
}

// trimData punches out of the data file every block the journal does not
// say whole: what a GET wrote before a crash, an eviction's block whose
// hole was not punched.
func trimData(path string, r *replayed) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	bs, fd := r.header.Block, int(f.Fd())
	for off := int64(0); off < r.header.Size; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil
		} else if err != nil {
			return err
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		for i := start / bs; i*bs < end && i*bs < r.header.Size; i++ {
			if _, ok := r.live[i]; !ok {
				if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, i*bs, r.header.bytesOf(i)); err != nil {
					return err
				}
			}
		}
		off = max(end, off+1)
	}
	return nil
}

// addCold adds c to the cold entries; an older cold entry of the same URL
// (another version) is removed.
func (d *diskCache) addCold(c *coldEntry) int64 {
	var freed int64
	if other, ok := d.cold[d.byURL[c.url]]; ok && other.name != c.name {
		if other.used.After(c.used) {
			d.dropCold(c.name)
			return c.bytes
		}
		freed = d.dropCold(other.name)
	}
	d.cold[c.name] = c
	d.byURL[c.url] = c.name
	d.metrics.journal.Add(float64(c.journal))
	return freed
}

// takeCold takes cold entry name out of the cold ones, for an open object;
// it returns its bytes.
func (d *diskCache) takeCold(name string) int64 {
	c := d.cold[name]
	if c == nil {
		return 0
	}
	delete(d.cold, name)
	if d.byURL[c.url] == name {
		delete(d.byURL, c.url)
	}
	d.metrics.journal.Add(-float64(c.journal))
	return c.bytes
}

// dropCold removes cold entry name from the disk; it returns its bytes.
func (d *diskCache) dropCold(name string) int64 {
	n := d.takeCold(name)
	d.remove(name)
	return n
}

// evictOldest removes the cold entry used longest ago; it returns its
// bytes (0: none is left).
func (d *diskCache) evictOldest() int64 {
	if len(d.cold) == 0 {
		return 0
	}
	all := make([]*coldEntry, 0, len(d.cold))
	for _, c := range d.cold {
		all = append(all, c)
	}
	oldest := slices.MinFunc(all, func(a, b *coldEntry) int { return a.used.Compare(b.used) })
	return d.dropCold(oldest.name)
}

// remove deletes an entry's files, its journal first: a data file alone is
// removed at the next start.
func (d *diskCache) remove(name string) {
	for _, ext := range []string{".log", ".data"} {
		if err := os.Remove(d.path(name, ext)); err != nil && !errors.Is(err, os.ErrNotExist) {
			d.log.Warn("object disk cache: removing an entry", zap.String("file", d.path(name, ext)), zap.Error(err))
		}
	}
}

// close releases the directory's lock.
func (d *diskCache) close() error {
	if d.lock == nil {
		return nil
	}
	err := errors.Join(unix.Flock(int(d.lock.Fd()), unix.LOCK_UN), d.lock.Close())
	d.lock = nil
	d.metrics.journal.Set(0) // the journals stay, for the next store
	return err
}
