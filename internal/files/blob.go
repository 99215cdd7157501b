package files

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// Blob is one file of a dataset in memory: a local file mapped whole, or an
// object of object storage whose bytes the node's cache fetches as ranges
// of it are held. Readers hold every range before they read it from Data
// and release it after; for local files both cost nothing.
type Blob struct {
	// Data is the whole file. For an object, only held ranges are
	// readable: an access elsewhere faults (mapped.Guard makes it an error).
	Data []byte
	// Path is the file's path or s3:// URL.
	Path string
	obj  *objstore.Object
	// ctx bounds the reads of an object: the Dataset's Context.
	ctx context.Context
}

// Load maps one of the dataset's files, or opens one of its objects.
func (d Dataset) Load(path string) (*Blob, error) {
	if !objstore.IsURL(path) {
		data, err := d.Map(path)
		if err != nil {
			return nil, err
		}
		return &Blob{Data: data, Path: path}, nil
	}
	loc, store, err := d.object(path)
	if err != nil {
		return nil, err
	}
	ctx := d.ctx()
	obj, err := store.Open(ctx, loc)
	if err != nil {
		return nil, err
	}
	return &Blob{Data: obj.Data(), Path: path, obj: obj, ctx: ctx}, nil
}

// Dup is another reader of the same file: a new mapping of a local file,
// another use of an object (no request, its reads bounded by the same
// context). Each is closed on its own.
func (b *Blob) Dup(d Dataset) (*Blob, error) {
	if b.obj == nil {
		return d.Load(b.Path)
	}
	return &Blob{Data: b.Data, Path: b.Path, obj: b.obj.Dup(), ctx: b.ctx}, nil
}

// Remote reports whether the blob is an object, read through the cache.
func (b *Blob) Remote() bool { return b.obj != nil }

// Size is the file's length in bytes.
func (b *Blob) Size() int64 {
	if b.obj != nil {
		return b.obj.Size()
	}
	return int64(len(b.Data))
}

// BlockSize is the unit an object is fetched in; 0 for a local file.
func (b *Blob) BlockSize() int64 {
	if b.obj == nil {
		return 0
	}
	return b.obj.BlockSize()
}

// HoldLimit is the most bytes of an object a reader should hold at once
// (half the node's cache); 0 for a local file.
func (b *Blob) HoldLimit() int64 {
	if b.obj == nil {
		return 0
	}
	return b.obj.HoldLimit()
}

// HoldWhole holds the whole file, refusing an object larger than half the
// node's cache (what would then be read whole, why, and what to do instead).
func (b *Blob) HoldWhole(why string) error {
	if b.obj != nil && b.obj.Size() > b.obj.HoldLimit() {
		return fmt.Errorf("%w: %w: %s is %d bytes, more than half the object cache (%d bytes); %s is read whole: raise --object-cache-mb or set --object-cache-dir",
			objstore.ErrObject, objstore.ErrBudget, b.Path, b.obj.Size(), 2*b.obj.HoldLimit(), why)
	}
	return b.Hold(0, uint64(b.Size()))
}

// Hold makes Data[off:off+n] readable until Release(off, n). For an
// object it fails when the Dataset's Context ends first.
func (b *Blob) Hold(off, n uint64) error {
	if b.obj == nil || n == 0 {
		return nil
	}
	return b.obj.Hold(b.ctx, int64(off), int64(n))
}

// HoldCached is Hold that never fetches or waits: it holds an object's
// range only when the cache has all of it, and reports whether it did
// (true for a local file). A true is ended by Release(off, n).
func (b *Blob) HoldCached(off, n uint64) bool {
	if b.obj == nil || n == 0 {
		return true
	}
	return b.obj.HoldCached(int64(off), int64(n))
}

// Release ends a Hold of the same range.
func (b *Blob) Release(off, n uint64) {
	if b.obj != nil && n != 0 {
		b.obj.Release(int64(off), int64(n))
	}
}

// Prefetch hints that Data[off:off+n] will be read soon: an object's cache
// fetches its blocks ahead. It never blocks or fails.
func (b *Blob) Prefetch(off, n uint64) {
	if b.obj != nil && off < uint64(b.obj.Size()) {
		b.obj.Prefetch(int64(off), int64(min(n, uint64(b.obj.Size())-off)))
	}
}

// ReadAt copies bytes of the file into p. For an object it fails when the
// Dataset's Context ends first.
func (b *Blob) ReadAt(p []byte, off int64) (int, error) {
	if b.obj != nil {
		n, err := b.obj.ReadAtContext(b.ctx, p, off)
		// Readers through ReadAt (compressed JSONL, Parquet) go forward:
		// the next blocks are fetched while these bytes are used.
		if n > 0 {
			b.Prefetch(uint64(off)+uint64(n), 2*uint64(b.obj.BlockSize()))
		}
		return n, err
	}
	if off < 0 {
		return 0, fmt.Errorf("file %q: read at negative offset %d", b.Path, off)
	}
	if off >= int64(len(b.Data)) {
		return 0, io.EOF
	}
	n := copy(p, b.Data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Close unmaps the file, or ends this reader's use of the object.
func (b *Blob) Close() error {
	if b.obj != nil {
		err := b.obj.Close()
		b.obj, b.Data = nil, nil
		return err
	}
	err := Unmap(b.Data)
	b.Data = nil
	return err
}

// objectInfo is an object described as a file, for Stat.
type objectInfo struct {
	name string
	size int64
}

func (i objectInfo) Name() string       { return i.name }
func (i objectInfo) Size() int64        { return i.size }
func (i objectInfo) Mode() fs.FileMode  { return 0o444 }
func (i objectInfo) ModTime() time.Time { return time.Time{} }
func (i objectInfo) IsDir() bool        { return false }
func (i objectInfo) Sys() any           { return nil }
