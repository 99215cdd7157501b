package objstore

import (
	"fmt"
	"strings"
	"time"
)

// Bounds on what the store says. Every size, count and length in an answer
// is checked against them before anything is allocated from it, and an
// answer past one is refused (ErrBadAnswer) with an error naming the
// object or prefix, the value and the bound.
const (
	// MaxObjectSize is the largest object the daemon opens: 5 TiB, the
	// largest object S3 (and GCS) can store. A larger or negative size is
	// a store lying or broken.
	MaxObjectSize = 5 << 40
	// MaxKeyBytes is the longest key a listing may hold: S3's own limit.
	MaxKeyBytes = 1024
	// MaxETagBytes is the longest ETag accepted (S3's are at most 43
	// characters: quotes, 32 hex digits, "-" and a part count).
	MaxETagBytes = 256
	// maxTokenBytes bounds a listing's continuation token (S3's are a few
	// hundred characters).
	maxTokenBytes = 4096
	// DefaultMaxListPages bounds the pages of one listing.
	DefaultMaxListPages = 10_000
	// DefaultMaxListKeys bounds the objects of one listing.
	DefaultMaxListKeys = 1_000_000
	// DefaultMaxListBytes bounds the bytes of the keys and ETags one listing
	// holds, counted as its pages arrive: a million keys of 35 bytes with
	// 32-byte ETags, or 64 thousand of the longest keys. (The key bound
	// alone let a store that lies hold a GiB of keys per listing.) The
	// objects the store remembers from listings are bounded by it too.
	DefaultMaxListBytes = 64 << 20
	// maxAnswerBytes bounds the body of any answer other than an object's
	// bytes: a listing page (S3's hold 1,000 keys, about 300 KB), an error.
	maxAnswerBytes = 16 << 20
	// maxHeaderBytes bounds the header of any answer.
	maxHeaderBytes = 64 << 10
	// DefaultMaxMappedBytes bounds the address space of the objects open at
	// once (each is mapped whole): half of the 128 TiB a process has on
	// x86-64 and arm64, so that the Go heap always has room to grow.
	DefaultMaxMappedBytes = 64 << 40
)

// version is what an object is pinned to at open: its ETag, or where the
// store gives none its Last-Modified date; its size always. Every GET's
// answer must carry the same, else ErrChanged.
type version struct {
	size     int64
	etag     string    // unquoted; "" when the store gives none
	modified time.Time // to the second; zero when the store gives none, or an ETag pins it
}

// pin is the version info describes: with an ETag, the ETag alone (a
// listing's Last-Modified may differ from a GET's for the same object, as
// S3's does for multipart uploads); without one, the Last-Modified date.
func pin(info Info) version {
	v := version{size: info.Size, etag: info.ETag}
	if v.etag == "" {
		v.modified = info.LastModified.Truncate(time.Second)
	}
	return v
}

// unversioned reports whether nothing but the size tells versions apart.
func (v version) unversioned() bool { return v.etag == "" && v.modified.IsZero() }

// same reports whether v and w are one version.
func (v version) same(w version) bool {
	return v.size == w.size && v.etag == w.etag && v.modified.Equal(w.modified)
}

// normETag is an ETag without its quotes or weak mark: stores differ in
// whether listings quote it.
func normETag(s string) string {
	s = strings.TrimPrefix(strings.TrimSpace(s), "W/")
	return strings.Trim(s, `"`)
}

// checkInfo checks what a listing or HEAD says of the object at loc.
func checkInfo(loc Location, size *int64, etag string) error {
	switch {
	case size == nil:
		return badAnswer("%s: no size given", loc)
	case *size < 0 || *size > MaxObjectSize:
		return badAnswer("%s: size %d bytes is outside [0, %d] (5 TiB, the largest object S3 stores)", loc, *size, int64(MaxObjectSize))
	case len(etag) > MaxETagBytes:
		return badAnswer("%s: ETag of %d bytes, more than %d", loc, len(etag), MaxETagBytes)
	}
	return nil
}

// quoteKey shows a key that may be long or odd in an error: quoted, cut at
// 100 bytes.
func quoteKey(k string) string {
	if len(k) > 100 {
		return fmt.Sprintf("%q... (%d bytes)", k[:100], len(k))
	}
	return fmt.Sprintf("%q", k)
}
