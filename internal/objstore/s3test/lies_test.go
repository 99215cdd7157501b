package s3test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// TestLies: each lie of a lying proxy shows in what a plain SDK client
// gets, signatures intact where the proxy changed the request, and the
// truth comes back with Lies{}.
func TestLies(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.CreateBucket(t, "lies")
	data, other := payload(8192), bytes.Repeat([]byte{9}, 5000)
	s.Put(t, "lies", "k", data)
	s.Put(t, "lies", "new", other)
	p := NewLyingProxy(t, s)
	c := s.Client(t, noRetry, func(o *s3.Options) { o.BaseEndpoint = aws.String(p.URL) })
	head := func() *s3.HeadObjectOutput {
		t.Helper()
		out, err := c.HeadObject(ctxT(t), &s3.HeadObjectInput{Bucket: aws.String("lies"), Key: aws.String("k")})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	status := func(out *s3.GetObjectOutput) int {
		return awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response).StatusCode
	}
	truth := head()

	p.SetLies(Lies{Sizes: map[string]int64{"lies/k": 1 << 62}})
	if got := aws.ToInt64(head().ContentLength); got != 1<<62 {
		t.Fatalf("HEAD with a size lie: %d bytes", got)
	}
	p.SetLies(Lies{Sizes: map[string]int64{"lies/k": -5}, StripETag: true, StripLastModified: true})
	page, err := c.ListObjectsV2(ctxT(t), &s3.ListObjectsV2Input{Bucket: aws.String("lies")})
	if err != nil {
		t.Fatal(err)
	}
	if o := page.Contents[0]; aws.ToString(o.Key) != "k" || aws.ToInt64(o.Size) != -5 || o.ETag != nil || o.LastModified != nil {
		t.Fatalf("listing with size and version lies: %+v", o)
	}
	if out := head(); out.ETag != nil || out.LastModified != nil {
		t.Fatalf("HEAD with version lies: ETag %v, Last-Modified %v", out.ETag, out.LastModified)
	}

	for _, mode := range []ListingLie{ListingRepeats, ListingEndless} {
		p.SetLies(Lies{Listing: mode})
		in := &s3.ListObjectsV2Input{Bucket: aws.String("lies")}
		var tokens []string
		for range 3 {
			page, err := c.ListObjectsV2(ctxT(t), in)
			if err != nil {
				t.Fatalf("listing %d, page %d: %v", mode, len(tokens)+1, err)
			}
			if !aws.ToBool(page.IsTruncated) || len(page.Contents) != 2 {
				t.Fatalf("listing %d: a page of %d keys, truncated %v", mode, len(page.Contents), aws.ToBool(page.IsTruncated))
			}
			tokens = append(tokens, aws.ToString(page.NextContinuationToken))
			in.ContinuationToken = page.NextContinuationToken
		}
		if repeats := tokens[0] == tokens[2]; repeats != (mode == ListingRepeats) {
			t.Fatalf("listing %d: tokens %q", mode, tokens)
		}
	}

	get := func(rng string) ([]byte, *s3.GetObjectOutput) {
		t.Helper()
		return getRange(t, c, "lies", "k", rng)
	}
	p.SetLies(Lies{IgnoreRange: true})
	if b, out := get("bytes=100-199"); status(out) != 200 || !bytes.Equal(b, data) {
		t.Fatalf("range ignored: status %d, %d bytes", status(out), len(b))
	}
	p.SetLies(Lies{ShiftRange: 4096})
	if b, out := get("bytes=100-199"); status(out) != 206 || !bytes.Equal(b, data[4196:4296]) || aws.ToString(out.ContentRange) != "bytes 4196-4295/8192" {
		t.Fatalf("range shifted: status %d, %s", status(out), aws.ToString(out.ContentRange))
	}
	p.SetLies(Lies{ExtraByte: true})
	if b, _ := get("bytes=0-9"); !bytes.Equal(b, append(bytes.Clone(data[:10]), '!')) {
		t.Fatalf("extra byte: %q", b)
	}
	// A replaced object: the new bytes and headers, whatever the client
	// asks of the old (If-Match dropped, or answered by the new one).
	if _, err := c.GetObject(ctxT(t), &s3.GetObjectInput{Bucket: aws.String("lies"), Key: aws.String("k"), IfMatch: truth.ETag}); err != nil {
		t.Fatalf("If-Match of the object's own ETag: %v", err)
	}
	p.SetLies(Lies{Replaced: map[string]string{"lies/k": "lies/new"}})
	_, err = c.GetObject(ctxT(t), &s3.GetObjectInput{Bucket: aws.String("lies"), Key: aws.String("k"), IfMatch: truth.ETag})
	var respErr *awshttp.ResponseError
	if !errors.As(err, &respErr) || respErr.HTTPStatusCode() != 412 {
		t.Fatalf("If-Match of a replaced object: %v, want 412", err)
	}
	p.SetLies(Lies{Replaced: map[string]string{"lies/k": "lies/new"}, IgnoreConditions: true})
	out, err := c.GetObject(ctxT(t), &s3.GetObjectInput{Bucket: aws.String("lies"), Key: aws.String("k"), IfMatch: truth.ETag, Range: aws.String("bytes=0-99")})
	if err != nil {
		t.Fatalf("If-Match dropped: %v", err)
	}
	b, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if !bytes.Equal(b, other[:100]) || aws.ToString(out.ETag) == aws.ToString(truth.ETag) || aws.ToString(out.ContentRange) != "bytes 0-99/5000" {
		t.Fatalf("replaced: %d bytes, ETag %s (old %s), %s", len(b), aws.ToString(out.ETag), aws.ToString(truth.ETag), aws.ToString(out.ContentRange))
	}
	if p.Lied() < 10 {
		t.Fatalf("%d answers lied", p.Lied())
	}

	p.SetLies(Lies{})
	if b, out := get("bytes=100-199"); status(out) != 206 || !bytes.Equal(b, data[100:200]) {
		t.Fatal("no lies: other bytes")
	}
	if out := head(); aws.ToString(out.ETag) != aws.ToString(truth.ETag) || aws.ToInt64(out.ContentLength) != 8192 {
		t.Fatalf("no lies: HEAD %+v", out)
	}
}

// TestLastModifiedIsMtime: versitygw's Last-Modified is its file's
// modification time, which tests set to tell versions apart.
func TestLastModifiedIsMtime(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.CreateBucket(t, "mtime")
	s.Put(t, "mtime", "k", []byte("x"))
	when := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(s.Dir, "mtime", "k"), when, when); err != nil {
		t.Fatal(err)
	}
	out, err := s.Client(t).HeadObject(ctxT(t), &s3.HeadObjectInput{Bucket: aws.String("mtime"), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToTime(out.LastModified); !got.Equal(when) {
		t.Fatalf("Last-Modified %v, want the file's mtime %v", got, when)
	}
}
