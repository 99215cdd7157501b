package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// Dir is the folder, inside a checkpoint folder, that holds the rank files.
const Dir = "dataloader"

// FileName is the name of rank r's state file in a world of w ranks.
func FileName(r, w uint32) string { return fmt.Sprintf("rank-%d-of-%d.json", r, w) }

var fileNameRE = regexp.MustCompile(`^rank-(\d+)-of-(\d+)\.json$`)

// file is the JSON form of a rank's state. Shards are stored by dataset as
// columns over a contiguous run of shard indices, which keeps a rank with
// 1024 shards at a few tens of kilobytes.
type file struct {
	Version     int         `json:"version"`
	DPRank      uint32      `json:"dp_rank"`
	DPSize      uint32      `json:"dp_size"`
	Step        uint64      `json:"step"`
	Fingerprint Fingerprint `json:"fingerprint"`
	Datasets    []shardRun  `json:"shards"`
	// Mixture is the mixture log, queued changes included (version 3).
	Mixture []MixChange `json:"mixture,omitempty"`
	// Skips is the log of skipped ranges (version 5).
	Skips []SkipRange `json:"skips,omitempty"`
	// Blocklists is the blocklist log (version 5).
	Blocklists []Blocklist `json:"blocklists,omitempty"`
}

type shardRun struct {
	Dataset int      `json:"dataset"`
	First   uint32   `json:"first"`
	Lines   []uint64 `json:"lines"`
	Epoch   []uint64 `json:"epoch"`
	Pos     []uint64 `json:"pos"`
	Offset  []uint64 `json:"offset"`
	Taken   []uint64 `json:"taken"`
	Base    []uint64 `json:"base,omitempty"`
}

// Encode returns the file form of a rank's state.
func Encode(fp Fingerprint, r Rank) ([]byte, error) {
	f := file{Version: versionFor(fp, r), DPRank: r.DPRank, DPSize: r.DPSize, Step: r.Step, Fingerprint: fp, Mixture: r.Mixture, Skips: r.Skips,
		Blocklists: r.Blocklists}
	for _, id := range sortedIDs(r.Shards) {
		n := len(f.Datasets)
		if n == 0 || f.Datasets[n-1].Dataset != id.Dataset ||
			f.Datasets[n-1].First+uint32(len(f.Datasets[n-1].Lines)) != id.Shard {
			f.Datasets = append(f.Datasets, shardRun{Dataset: id.Dataset, First: id.Shard})
			n++
		}
		run := &f.Datasets[n-1]
		s := r.Shards[id]
		run.Lines = append(run.Lines, s.Lines)
		run.Epoch = append(run.Epoch, s.Window.Epoch)
		run.Pos = append(run.Pos, s.Window.Pos)
		run.Offset = append(run.Offset, s.Window.Offset)
		run.Taken = append(run.Taken, s.Taken)
		run.Base = append(run.Base, s.Base)
	}
	return json.Marshal(f)
}

// Decode parses a rank's state file; name is used in errors.
func Decode(name string, b []byte) (Fingerprint, Rank, error) {
	fp, r, err := decode(b)
	if err != nil {
		return Fingerprint{}, Rank{}, fmt.Errorf("%w: %s: %v", ErrMismatch, name, err)
	}
	return fp, r, nil
}

// decode is Decode whose errors do not name the file, so that a caller
// with many files names only the one refused (Merge).
func decode(b []byte) (Fingerprint, Rank, error) {
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return Fingerprint{}, Rank{}, fmt.Errorf("not a dataloaderd state file: %v", err)
	}
	if f.Version < 1 || f.Version > Version {
		return Fingerprint{}, Rank{}, fmt.Errorf("state version %d, this daemon reads versions 1 to %d", f.Version, Version)
	}
	if f.DPSize == 0 || f.DPRank >= f.DPSize {
		return Fingerprint{}, Rank{}, fmt.Errorf("dp_rank %d of dp_size %d", f.DPRank, f.DPSize)
	}
	r := Rank{DPRank: f.DPRank, DPSize: f.DPSize, Step: f.Step, Shards: map[ShardID]Shard{}, Mixture: f.Mixture, Skips: f.Skips, Blocklists: f.Blocklists}
	if err := checkBlocklists(f.Blocklists, f.Step); err != nil {
		return Fingerprint{}, Rank{}, err
	}
	if err := mixtureProblem(f.Mixture, f.Fingerprint.Names()); err != nil {
		return Fingerprint{}, Rank{}, err
	}
	if err := checkSkipLog(f.Skips, f.Step); err != nil {
		return Fingerprint{}, Rank{}, err
	}
	if f.Version < 5 && len(f.Skips) > 0 {
		return Fingerprint{}, Rank{}, fmt.Errorf("version %d state logs skipped steps (only version 5 does)", f.Version)
	}
	if f.Version < 5 && len(f.Blocklists) > 0 {
		return Fingerprint{}, Rank{}, fmt.Errorf("version %d state logs blocklists (only version 5 does)", f.Version)
	}
	if q := Queued(f.Mixture, f.Step); f.Version < 3 && len(q) > 0 {
		return Fingerprint{}, Rank{}, fmt.Errorf("version %d state logs a change at step %d, after its step %d (only version 3 queues changes)",
			f.Version, q[0].Step, f.Step)
	}
	for _, run := range f.Datasets {
		n := len(run.Lines)
		if f.Version == 1 {
			run.Base = make([]uint64, n)
		}
		if len(run.Epoch) != n || len(run.Pos) != n || len(run.Offset) != n || len(run.Taken) != n || len(run.Base) != n {
			return Fingerprint{}, Rank{}, fmt.Errorf("dataset %d: shard columns of unequal length", run.Dataset)
		}
		for i := 0; i < n; i++ {
			id := ShardID{Dataset: run.Dataset, Shard: run.First + uint32(i)}
			if _, dup := r.Shards[id]; dup {
				return Fingerprint{}, Rank{}, fmt.Errorf("%v listed twice", id)
			}
			if run.Base[i] > run.Lines[i] {
				return Fingerprint{}, Rank{}, fmt.Errorf("%v: base %d is past its %d lines", id, run.Base[i], run.Lines[i])
			}
			r.Shards[id] = Shard{Lines: run.Lines[i], Window: Cursor{Epoch: run.Epoch[i], Pos: run.Pos[i], Offset: run.Offset[i]}, Taken: run.Taken[i], Base: run.Base[i]}
		}
	}
	return f.Fingerprint, r, nil
}

// Folder is a checkpoint folder as Save and ReadFolder reach it; names are
// relative to it. The daemon's file layer provides one that confines it to
// the allowed roots; state itself opens no file.
type Folder interface {
	// Path is the folder's path, for messages and the saved file's path.
	Path() string
	// ReadDir lists the directory name, sorted by name.
	ReadDir(name string) ([]fs.DirEntry, error)
	// ReadFile reads the file name, which may be at most limit bytes: its
	// size is read from the opened file, through any link, before a byte of
	// it is, and a larger one is refused unread (one that grows past limit
	// while read, having read no more than limit and a byte), with an error
	// that has, in its chain, an Oversized method giving the size and limit.
	ReadFile(name string, limit int64) ([]byte, error)
	// ReadPrefix reads at most the first n bytes of the file name, whatever
	// its size (fewer when it is shorter), opened and checked as ReadFile
	// opens and checks it.
	ReadPrefix(name string, n int64) ([]byte, error)
	// MkdirAll makes the directory name and its missing parents.
	MkdirAll(name string) error
	// WriteFileAtomic replaces the file name's contents so that a reader
	// sees the old or the new contents whole, even across a crash: a temp
	// file in the same directory, fsync, rename, fsync of the directory.
	WriteFileAtomic(name string, data []byte) error
}

// Save writes the rank's state into <folder>/dataloader/ atomically (see
// Folder.WriteFileAtomic) and returns the file's path and size.
func Save(folder Folder, fp Fingerprint, r Rank) (string, int, error) {
	b, err := Encode(fp, r)
	if err != nil {
		return "", 0, err
	}
	if err := folder.MkdirAll(Dir); err != nil {
		return "", 0, fmt.Errorf("save state: %w", err)
	}
	name := filepath.Join(Dir, FileName(r.DPRank, r.DPSize))
	path := filepath.Join(folder.Path(), name)
	if err := folder.WriteFileAtomic(name, b); err != nil {
		return "", 0, fmt.Errorf("save state %s: %w", path, err)
	}
	return path, len(b), nil
}

// ReadFolder reads every rank file in <folder>/dataloader/. The files must be
// one complete world: the same dp_size, every rank once.
func ReadFolder(folder Folder) ([][]byte, []string, error) {
	dir := filepath.Join(folder.Path(), Dir)
	entries, err := folder.ReadDir(Dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("%w: resume folder %s has no %s/ directory of rank files", ErrMismatch, folder.Path(), Dir)
		}
		return nil, nil, fmt.Errorf("resume from %s: %w", folder.Path(), err)
	}
	var blobs [][]byte
	var names []string
	world := -1
	seen := map[int]bool{}
	for _, e := range entries {
		m := fileNameRE.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		r, _ := strconv.Atoi(m[1])
		w, _ := strconv.Atoi(m[2])
		if world >= 0 && w != world {
			return nil, nil, fmt.Errorf("%w: %s holds rank files of dp_size %d and %d", ErrMismatch, dir, world, w)
		}
		world = w
		seen[r] = true
		b, err := folder.ReadFile(filepath.Join(Dir, e.Name()), MaxFileBytes)
		if err != nil {
			return nil, nil, fmt.Errorf("resume: %w", err)
		}
		blobs = append(blobs, b)
		names = append(names, filepath.Join(dir, e.Name()))
	}
	if world < 0 {
		return nil, nil, fmt.Errorf("%w: %s holds no rank-<r>-of-<w>.json files", ErrMismatch, dir)
	}
	for r := 0; r < world; r++ {
		if !seen[r] {
			return nil, nil, fmt.Errorf("%w: %s lacks %s: every rank of the saved world must have saved", ErrMismatch, dir, FileName(uint32(r), uint32(world)))
		}
	}
	return blobs, names, nil
}
