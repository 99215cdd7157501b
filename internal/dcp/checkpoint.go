// Package dcp reads checkpoints written by torch.distributed.checkpoint
// (DCP) with its default file system writer: a folder holding .metadata,
// the pickle of DCP's Metadata (what each entry of the state dict is, by
// its flattened name, and where its bytes lie), and the files __<r>_<n>.distcp
// in which each entry was written at an offset by torch.save (tensors, and
// every other value as the pickle of it).
//
// It is a strict reader of what those files hold, not a Python: a pickle
// is decoded to plain values (no class is looked up, no function called),
// with bounds on the bytes, opcodes and nesting it may take, so a hostile
// or damaged file is refused by name and offset rather than costing the
// reader its memory.
package dcp

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// MetadataFile is the name of the pickle of DCP's Metadata in a checkpoint
// folder.
const MetadataFile = ".metadata"

// MaxMetadataBytes is the largest .metadata read (about 200 bytes a
// tensor or piece of one); metadataLimits bound it first.
const MaxMetadataBytes = 64 << 20

// metadataLimits bound the decoding of .metadata: its opcodes (about two
// bytes each, a hundred a tensor: 16M take about 150,000 tensors or pieces
// of one, decoded into some 15 bytes an opcode; the most hostile file
// costs about 1 GiB) and its nesting (a handful deep).
var metadataLimits = Limits{Ops: 16 << 20, Marks: 64}

// Entry is an entry of the checkpoint's state dict, by its flattened name
// (its FQN: the keys of nested dicts joined by dots).
type Entry struct {
	FQN string
	// Kind is DCP's class of it: "TensorStorageMetadata" for a tensor,
	// "BytesStorageMetadata" for any other value (torch.save's pickle).
	Kind string
	// Size is a tensor's size.
	Size []int64
}

// item is where one saved piece of an entry lies.
type item struct {
	file           string
	offset, length int64
	transforms     []string
}

// Checkpoint is an open DCP checkpoint folder.
type Checkpoint struct {
	dir     string
	root    *os.Root
	entries map[string]Entry
	items   map[string][]item
	files   map[string]*os.File
}

// IsCheckpoint says whether dir holds a .metadata file (a regular file:
// what DCP writes last, when every rank's files are whole).
func IsCheckpoint(dir string) (bool, error) {
	fi, err := os.Stat(filepath.Join(dir, MetadataFile))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return fi.Mode().IsRegular(), nil
}

// Open reads the .metadata of the checkpoint folder dir. Files are read
// inside dir only (os.Root): a name in the metadata cannot reach out of it.
func Open(dir string) (*Checkpoint, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	c := &Checkpoint{dir: dir, root: root, entries: map[string]Entry{}, items: map[string][]item{}, files: map[string]*os.File{}}
	if err := c.readMetadata(); err != nil {
		root.Close()
		return nil, err
	}
	return c, nil
}

// Close closes the checkpoint's files.
func (c *Checkpoint) Close() error {
	for _, f := range c.files {
		f.Close()
	}
	return c.root.Close()
}

// Dir is the checkpoint's folder.
func (c *Checkpoint) Dir() string { return c.dir }

// FQNs lists the entries' names, sorted.
func (c *Checkpoint) FQNs() []string {
	out := make([]string, 0, len(c.entries))
	for k := range c.entries {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Entry returns the entry named fqn.
func (c *Checkpoint) Entry(fqn string) (Entry, bool) {
	e, ok := c.entries[fqn]
	return e, ok
}

// Object decodes the value the entry fqn holds (a BytesStorageMetadata
// one), whose pickle may be at most limit bytes.
func (c *Checkpoint) Object(fqn string, limit int64) (any, error) {
	a, err := c.archive(fqn, "BytesStorageMetadata")
	if err != nil {
		return nil, err
	}
	return a.object(limit)
}

// Tensor reads the tensor the entry fqn holds, saved in one piece (as a
// tensor no rank shards is), whose storage may be at most limit bytes.
func (c *Checkpoint) Tensor(fqn string, limit int64) (Tensor, error) {
	a, err := c.archive(fqn, "TensorStorageMetadata")
	if err != nil {
		return Tensor{}, err
	}
	return a.tensor(limit)
}

// archive opens the torch.save archive of the entry fqn, of kind kind.
func (c *Checkpoint) archive(fqn, kind string) (*archive, error) {
	e, ok := c.entries[fqn]
	if !ok {
		return nil, fmt.Errorf("checkpoint %s has no entry %q", c.dir, fqn)
	}
	if e.Kind != kind {
		return nil, fmt.Errorf("checkpoint %s: entry %q is a %s, not a %s", c.dir, fqn, e.Kind, kind)
	}
	its := c.items[fqn]
	if len(its) != 1 {
		return nil, fmt.Errorf("checkpoint %s: entry %q is saved in %d pieces; this reader takes one", c.dir, fqn, len(its))
	}
	it := its[0]
	name := fmt.Sprintf("%s (entry %q at bytes %d to %d)", filepath.Join(c.dir, it.file), fqn, it.offset, it.offset+it.length)
	if len(it.transforms) > 0 {
		return nil, fmt.Errorf("%s: stored through %s, which this reader does not undo", name, strings.Join(it.transforms, ", "))
	}
	f, err := c.file(it.file)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if it.offset > fi.Size() || it.length > fi.Size()-it.offset {
		return nil, fmt.Errorf("%s: the file is %d bytes: cut short", name, fi.Size())
	}
	return openArchive(name, io.NewSectionReader(f, it.offset, it.length), it.length)
}

// file opens a data file of the checkpoint once.
func (c *Checkpoint) file(name string) (*os.File, error) {
	if f, ok := c.files[name]; ok {
		return f, nil
	}
	if name != filepath.Base(name) || name == "." || name == ".." || name == MetadataFile {
		return nil, fmt.Errorf("checkpoint %s: its metadata names the data file %q, not a file of the folder", c.dir, name)
	}
	f, err := c.root.Open(name)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", c.dir, err)
	}
	c.files[name] = f
	return f, nil
}
