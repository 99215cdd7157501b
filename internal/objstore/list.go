package objstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// list lists the objects whose keys start with prefix, sorted by key. With
// flat false it stops at the next "/" after the prefix (one level, as a
// directory listing would).
//
// A listing is bounded: it is refused (ErrBadAnswer, naming the prefix and
// the bound) past maxPages pages, maxKeys keys or maxBytes bytes of keys and
// ETags (counted as the pages arrive), when a continuation token
// comes again (a listing going round) or a page said to be truncated gives
// none, and when a key is longer than MaxKeyBytes, lies outside the prefix
// or comes twice, or an object's size or ETag is past its bound.
func (c *client) list(ctx context.Context, bucket, prefix string, flat bool) ([]Info, error) {
	in := &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: &prefix}
	if !flat {
		in.Delimiter = aws.String("/")
	}
	url := Location{Bucket: bucket, Key: prefix}.String()
	refuse := func(format string, args ...any) error {
		return &ObjectError{URL: url, Op: "list", Err: badAnswer(format, args...)}
	}
	seed := maphash.MakeSeed()
	tokens := map[uint64]int{} // hash of each continuation token: the page that gave it
	var out []Info
	var held int64 // bytes of the keys and ETags in out
	for pages := 1; ; pages++ {
		if pages > c.maxPages {
			return nil, refuse("more than %d pages, the bound of a listing (one that never ends?)", c.maxPages)
		}
		var page *s3.ListObjectsV2Output
		err := c.do(ctx, "list", url, "list", false, func(ctx context.Context) error {
			var err error
			page, err = c.s3.ListObjectsV2(ctx, in)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			key := aws.ToString(o.Key)
			switch {
			case len(key) > MaxKeyBytes:
				return nil, refuse("key %s is longer than %d bytes", quoteKey(key), MaxKeyBytes)
			case !strings.HasPrefix(key, prefix):
				return nil, refuse("key %s is not under the prefix listed", quoteKey(key))
			case len(out) >= c.maxKeys:
				return nil, refuse("more than %d keys, the bound of a listing", c.maxKeys)
			}
			etag := aws.ToString(o.ETag)
			if held += int64(len(key) + len(etag)); held > c.maxBytes {
				return nil, refuse("more than %d bytes of keys and ETags (at key %d), the bound of a listing", c.maxBytes, len(out)+1)
			}
			if err := checkInfo(Location{Bucket: bucket, Key: key}, o.Size, etag); err != nil {
				return nil, &ObjectError{URL: url, Op: "list", Err: err}
			}
			out = append(out, Info{Key: key, Size: *o.Size, ETag: normETag(etag), LastModified: aws.ToTime(o.LastModified)})
		}
		if !aws.ToBool(page.IsTruncated) {
			break
		}
		token := aws.ToString(page.NextContinuationToken)
		h := maphash.String(seed, token)
		switch {
		case token == "":
			return nil, refuse("page %d says the listing goes on but gives no continuation token", pages)
		case len(token) > maxTokenBytes:
			return nil, refuse("page %d gives a continuation token of %d bytes, more than %d", pages, len(token), maxTokenBytes)
		case tokens[h] > 0:
			return nil, refuse("page %d gives the continuation token page %d gave: a listing that never ends", pages, tokens[h])
		}
		tokens[h] = pages
		in.ContinuationToken = &token
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	for i := 1; i < len(out); i++ {
		if out[i].Key == out[i-1].Key {
			return nil, refuse("key %s comes twice", quoteKey(out[i].Key))
		}
	}
	return out, nil
}

// listBounds fills the bounds of a listing.
func (o *Options) listBounds() error {
	if o.MaxListPages == 0 {
		o.MaxListPages = DefaultMaxListPages
	}
	if o.MaxListKeys == 0 {
		o.MaxListKeys = DefaultMaxListKeys
	}
	if o.MaxListBytes == 0 {
		o.MaxListBytes = DefaultMaxListBytes
	}
	if o.MaxMappedBytes == 0 {
		o.MaxMappedBytes = DefaultMaxMappedBytes
	}
	if o.MaxListPages < 0 || o.MaxListKeys < 0 || o.MaxListBytes < 0 || o.MaxMappedBytes < 0 {
		return fmt.Errorf("object store bounds: pages %d, keys %d, listed bytes %d, mapped bytes %d: want positive",
			o.MaxListPages, o.MaxListKeys, o.MaxListBytes, o.MaxMappedBytes)
	}
	return nil
}
