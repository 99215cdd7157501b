// Package objstore reads datasets that live in S3-compatible object storage
// (AWS S3, GCS through its S3 API, MinIO, Ceph RGW) through one cache per
// node: every session of the daemon reads an object's bytes through the same
// Object, whose blocks are fetched by ranged GETs once, kept in a memory or
// disk budget, and filled ahead of demand from the units the shards read
// next. Credentials and the endpoint come from the standard AWS environment
// and config files.
package objstore

import (
	"errors"
	"fmt"
	"strings"
)

// Scheme is the prefix of object paths: s3://bucket/key.
const Scheme = "s3://"

// ErrInvalidURL marks a malformed s3:// path.
var ErrInvalidURL = errors.New("invalid object URL")

// IsURL reports whether path names object storage.
func IsURL(path string) bool { return strings.HasPrefix(path, Scheme) }

// Location is a bucket and a key (or key prefix) in it.
type Location struct {
	Bucket, Key string
}

// Parse splits s3://bucket/key. The key may be empty (the whole bucket) or a
// prefix or glob; the bucket must be a plausible bucket name.
func Parse(path string) (Location, error) {
	if !IsURL(path) {
		return Location{}, fmt.Errorf("%w: %q does not start with %s", ErrInvalidURL, path, Scheme)
	}
	rest := path[len(Scheme):]
	bucket, key, _ := strings.Cut(rest, "/")
	if bucket == "" {
		return Location{}, fmt.Errorf("%w: %q names no bucket (want s3://bucket/key)", ErrInvalidURL, path)
	}
	if len(bucket) > 255 || strings.ContainsAny(bucket, "*?[] \\") {
		return Location{}, fmt.Errorf("%w: %q: bucket %q is not a bucket name", ErrInvalidURL, path, bucket)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "." || seg == ".." {
			// Some stores and proxies normalize them: a prefix could be left.
			return Location{}, fmt.Errorf("%w: %q: key has a %q segment", ErrInvalidURL, path, seg)
		}
	}
	return Location{Bucket: bucket, Key: key}, nil
}

// String is the location as an s3:// URL.
func (l Location) String() string { return Scheme + l.Bucket + "/" + l.Key }

// Within reports whether l lies under the prefix p: the same bucket, and a
// key that is p's key or continues it past a "/" (or p's key ends in "/", or
// is empty). s3://b/data does not contain s3://b/database.
func (l Location) Within(p Location) bool {
	if l.Bucket != p.Bucket {
		return false
	}
	if p.Key == "" || l.Key == p.Key {
		return true
	}
	prefix := p.Key
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return strings.HasPrefix(l.Key, prefix)
}
