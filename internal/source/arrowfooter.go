// An Arrow IPC file read by its footer: the footer, then each record
// batch's metadata and the two offsets that count its tokens, a group of
// batches at a time. An object's are fetched by range, those of the next
// group ahead of their reads, so that opening fetches about the footer
// and the metadata, never the tokens.

package source

import (
	"github.com/apache/arrow-go/v18/arrow/ipc"
)

// arrowGroup is how many record batches are described at once: their
// metadata, then their offsets, are fetched together.
const arrowGroup = 32

// hold holds bytes [off, off+n) of the file and returns their release.
func (f *arrowFile) hold(off, n uint64) (release func(), err error) {
	if err := f.blob.Hold(off, n); err != nil {
		return nil, holdError(f.dataset, err)
	}
	return func() { f.blob.Release(off, n) }, nil
}

// holdBlocks holds what arrow-go reads of each block, n bytes from its
// start, and returns their release.
func (f *arrowFile) holdBlocks(blocks []arrowBlock, n func(arrowBlock) int64) (release func(), err error) {
	var releases []func()
	release = func() {
		for _, r := range releases {
			r()
		}
	}
	for _, blk := range blocks {
		f.blob.Prefetch(uint64(blk.offset), uint64(n(blk)))
	}
	for _, blk := range blocks {
		r, err := f.hold(uint64(blk.offset), uint64(n(blk)))
		if err != nil {
			release()
			return nil, err
		}
		releases = append(releases, r)
	}
	return release, nil
}

// holdFooter holds the file's footer and the bytes that give its length,
// and returns their release.
func (f *arrowFile) holdFooter() (release func(), err error) {
	size := uint64(len(f.mapping))
	tail := min(size, arrowTail)
	releaseTail, err := f.hold(size-tail, tail)
	if err != nil {
		return nil, err
	}
	from, to, err := arrowFooterAt(f.mapping)
	if err != nil {
		releaseTail()
		return nil, f.error("not a readable Arrow IPC file: %v", err)
	}
	releaseFooter, err := f.hold(uint64(from), uint64(to-from))
	if err != nil {
		releaseTail()
		return nil, err
	}
	return func() { releaseFooter(); releaseTail() }, nil
}

// readFileFormat reads the footer, its dictionaries (whole: arrow-go reads
// them with the schema), and then each record batch's metadata.
func (f *arrowFile) readFileFormat() error {
	releaseFooter, err := f.holdFooter()
	if err != nil {
		return err
	}
	defer releaseFooter()
	dicts, blocks, err := checkArrowFooter(f.mapping)
	if err != nil {
		return f.error("not a readable Arrow IPC file: %v", err)
	}
	releaseDicts, err := f.holdBlocks(dicts, func(b arrowBlock) int64 { return b.meta + b.body })
	if err != nil {
		return err
	}
	defer releaseDicts()
	for _, blk := range dicts {
		if err := checkArrowBlock(f.mapping, blk); err != nil {
			return f.error("not a readable Arrow IPC file: %v", err)
		}
	}
	r, err := ipc.NewMappedFileReader(f.mapping, ipc.WithEnsureNativeEndian(false))
	if err != nil {
		return f.error("not a readable Arrow IPC file: %v", err)
	}
	defer r.Close()
	if err := f.useSchema(r.Schema()); err != nil {
		return err
	}
	for lo := 0; lo < len(blocks); lo += arrowGroup {
		if err := f.addGroup(r, blocks, lo, min(lo+arrowGroup, len(blocks))); err != nil {
			return err
		}
	}
	return nil
}

// addGroup describes record batches [lo, hi) from their metadata, then
// counts their tokens; the next group's metadata is fetched meanwhile.
func (f *arrowFile) addGroup(r *ipc.FileReader, blocks []arrowBlock, lo, hi int) error {
	meta := func(b arrowBlock) int64 { return b.meta }
	for _, blk := range blocks[hi:min(hi+arrowGroup, len(blocks))] {
		f.blob.Prefetch(uint64(blk.offset), uint64(blk.meta))
	}
	release, err := f.holdBlocks(blocks[lo:hi], meta)
	if err != nil {
		return err
	}
	defer release()
	for i := lo; i < hi; i++ {
		if err := checkArrowBlock(f.mapping, blocks[i]); err != nil {
			return f.error("not a readable Arrow IPC file: %v", err)
		}
		rec, err := r.RecordBatchAt(i)
		if err != nil {
			return f.error("record batch %d: %v", i, err)
		}
		err = f.describeBatch(rec)
		rec.Release()
		if err != nil {
			return err
		}
		f.prefetchOffsets(i)
	}
	for i := lo; i < hi; i++ {
		if err := f.countBatch(i); err != nil {
			return err
		}
	}
	return nil
}

// prefetchOffsets asks the cache to fetch the first and last offsets of
// list-layout batch b, which countBatch reads.
func (f *arrowFile) prefetchOffsets(b int) {
	batch := f.batches[b]
	if f.perBatch || batch.rows == 0 {
		return
	}
	f.blob.Prefetch(batch.offsetsAt, f.offsetWidth)
	f.blob.Prefetch(batch.offsetsAt+batch.rows*f.offsetWidth, f.offsetWidth)
}
