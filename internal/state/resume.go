package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// ReadOwned is how rank r of a world of w resumes from a checkpoint folder:
// it reads whole, of the rank files in <folder>/dataloader/, only those
// whose shards overlap its own (of the others, their step alone, below),
// and returns their merged state, holding the cursors of its own shards.
//
// Which files those are follows from their names: rank-q-of-W.json holds
// the shards rank q of W owned (Owned), so a rank resuming onto as many
// ranks reads one file and, onto fewer, about W/w; before, every rank read
// every file, N ranks reading N^2 files. Each file is read only if its size
// is within the largest state its rank could have written under the current
// config (FileBound), and one at a time: the Folder reads the size of the
// opened file, a link's target's, and refuses a file past the bound before
// a byte of it is read, or, grown while read, having read no more than the
// bound; either is refused by name. The world must be complete by name (every
// rank-q-of-W for q < W).
//
// The step is the world's: the highest of every rank file's, as when every
// rank read every file. The ranks of a world save independently (each
// rank's latest save before a crash; every shard's cursor is in exactly one
// file), so the files may be of different steps, and a rank that took the
// highest of the files it reads would resume at another step than its
// peers. So each rank reads the step of every file of the world first, from
// at most its first StepPrefixBytes (stepOf; the encoder writes it there),
// and the files it needs whole after; a file whose start gives no step is
// refused by name. The mixture log comes from the files read (every rank of
// a world logs the same changes), taken at that step: a rank that reads
// files whose logs mix the batches after it differently treats its
// configured weights as a change, as Merge does.
func ReadOwned(folder Folder, cur Fingerprint, r, w uint32) (*Restored, error) {
	files, world, err := listWorld(folder)
	if err != nil {
		return nil, err
	}
	s, err := measure(cur)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(folder.Path(), Dir)
	lo, hi := Owned(r, w, cur.LogicalShards)
	needed := func(q uint32) bool {
		qlo, qhi := Owned(q, world, cur.LogicalShards)
		return qhi > lo && qlo < hi && qlo != qhi
	}
	read := func(q uint32) ([]byte, error) {
		qlo, qhi := Owned(q, world, cur.LogicalShards)
		return readRankFile(folder, files[q].Name(), s.cursors(qhi-qlo)+MaxLogBytes, q, world, qlo, qhi, len(cur.Datasets))
	}
	steps := make([]uint64, world)
	var step uint64
	for q := uint32(0); q < world; q++ {
		path := filepath.Join(dir, files[q].Name())
		b, err := folder.ReadPrefix(filepath.Join(Dir, files[q].Name()), StepPrefixBytes)
		if err != nil {
			return nil, fmt.Errorf("resume: %w", err)
		}
		if steps[q], err = stepOf(b); err != nil {
			var whole []byte
			if needed(q) { // its own errors first: too large, not JSON
				var rerr error
				if whole, rerr = read(q); rerr != nil {
					return nil, rerr
				}
			}
			return nil, stepRefused(path, whole, err)
		}
		step = max(step, steps[q])
	}
	m := newMerger(cur, lo, hi, step, func(q int) string { return filepath.Join(dir, files[uint32(q)].Name()) })
	for q := uint32(0); q < world; q++ {
		if !needed(q) {
			continue
		}
		b, err := read(q)
		if err != nil {
			return nil, err
		}
		st, err := m.add(int(q), b, steps[q])
		if err != nil {
			return nil, err
		}
		if st.DPRank != q || st.DPSize != world {
			return nil, fmt.Errorf("%w: %s holds the state of dp_rank %d of dp_size %d, not the one its name says",
				ErrMismatch, filepath.Join(dir, files[q].Name()), st.DPRank, st.DPSize)
		}
	}
	return m.done(false)
}

// readRankFile reads the rank file name of <folder>/dataloader/, the state
// of dp_rank q of world (shards lo to hi-1 of datasets datasets), which
// may be at most bound bytes.
func readRankFile(folder Folder, name string, bound int64, q, world, lo, hi uint32, datasets int) ([]byte, error) {
	b, err := folder.ReadFile(filepath.Join(Dir, name), bound)
	var big oversized
	if errors.As(err, &big) {
		switch size, limit, ok := big.Oversized(); {
		case ok && limit < bound: // the folder's own cap on any file
			return nil, fmt.Errorf("%w: %w", ErrTooLarge, err)
		case ok:
			return nil, tooLarge(filepath.Join(folder.Path(), Dir, name), size, bound, q, world, lo, hi, datasets)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	return b, nil
}

// oversized is the error of a Folder's ReadFile refusing a file larger
// than the limit it was given (the file layer's *files.FileError).
type oversized interface {
	Oversized() (size, limit int64, ok bool)
}

func tooLarge(path string, size, bound int64, q, world, lo, hi uint32, datasets int) error {
	return fmt.Errorf("%w: %s is %d bytes, more than the %d bytes (%s) the state of dp_rank %d of %d (shards %d to %d of %d datasets) can take under this config; it was not read past the bound",
		ErrTooLarge, path, size, bound, mib(bound), q, world, lo, hi-1, datasets)
}

// listWorld lists the rank files of <folder>/dataloader/ by rank, and the
// world's size; the files must be one complete world, by name: one dp_size,
// every rank once.
func listWorld(folder Folder) (map[uint32]fs.DirEntry, uint32, error) {
	dir := filepath.Join(folder.Path(), Dir)
	entries, err := folder.ReadDir(Dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, 0, fmt.Errorf("%w: resume folder %s has no %s/ directory of rank files", ErrMismatch, folder.Path(), Dir)
		}
		return nil, 0, fmt.Errorf("resume from %s: %w", folder.Path(), err)
	}
	files := map[uint32]fs.DirEntry{}
	world := int64(-1)
	for _, e := range entries {
		m := fileNameRE.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		r, err1 := strconv.ParseUint(m[1], 10, 32)
		w, err2 := strconv.ParseUint(m[2], 10, 32)
		if err1 != nil || err2 != nil || r >= w {
			return nil, 0, fmt.Errorf("%w: %s: %s is not the file of a rank of its world", ErrMismatch, dir, e.Name())
		}
		if world >= 0 && int64(w) != world {
			return nil, 0, fmt.Errorf("%w: %s holds rank files of dp_size %d and %d", ErrMismatch, dir, world, w)
		}
		world = int64(w)
		if _, dup := files[uint32(r)]; dup {
			return nil, 0, fmt.Errorf("%w: %s holds two files of rank %d", ErrMismatch, dir, r)
		}
		files[uint32(r)] = e
	}
	if world < 0 {
		return nil, 0, fmt.Errorf("%w: %s holds no rank-<r>-of-<w>.json files", ErrMismatch, dir)
	}
	for r := uint32(0); r < uint32(world); r++ {
		if files[r] == nil {
			return nil, 0, fmt.Errorf("%w: %s lacks %s: every rank of the saved world must have saved", ErrMismatch, dir, FileName(r, uint32(world)))
		}
	}
	return files, uint32(world), nil
}
