package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// get writes bytes [off, off+n) of the object, pinned to version v, to w
// at the same offsets. Only an answer that is exactly those bytes of that
// version becomes data: 206 with Content-Range "bytes off-(off+n-1)/size"
// and a body of n bytes (another status, range or length is a wrong
// answer, retried like a 5xx), carrying v's ETag (asked for by If-Match)
// or, without one, its Last-Modified date (another version, or another
// total size, is ErrChanged). Nothing is written before the status and
// headers are checked.
func (c *client) get(ctx context.Context, loc Location, v version, off, n int64, w io.WriterAt) error {
	rng := fmt.Sprintf("bytes=%d-%d", off, off+n-1)
	op := "get " + strings.TrimPrefix(rng, "bytes=")
	return c.do(ctx, "get", loc.String(), op, true, func(ctx context.Context) error {
		in := &s3.GetObjectInput{Bucket: &loc.Bucket, Key: &loc.Key, Range: &rng}
		if v.etag != "" {
			in.IfMatch = aws.String(`"` + v.etag + `"`)
		}
		// No If-Unmodified-Since for a date: stores that keep dates finer
		// than the header's second answer 412 to the object's own date. The
		// answer's Last-Modified is checked instead.
		out, err := c.s3.GetObject(ctx, in)
		var resp *awshttp.ResponseError
		if errors.As(err, &resp) && resp.HTTPStatusCode() == http.StatusRequestedRangeNotSatisfiable {
			// The range lies within the size pinned at open.
			return fmt.Errorf("%w: no bytes %d-%d (416), of the %d bytes at open: %w", ErrChanged, off, off+n-1, v.size, err)
		}
		if err != nil {
			return err
		}
		defer out.Body.Close()
		if err := checkAnswer(out, v, off, n); err != nil {
			return err
		}
		buf := copyBuffers.Get().(*[copyBufferBytes]byte)
		copyBuffersOut.Add(1)
		got, err := io.CopyBuffer(io.NewOffsetWriter(localWriter{w}, off), io.LimitReader(out.Body, n), buf[:])
		copyBuffersOut.Add(-1)
		copyBuffers.Put(buf)
		c.metrics.fetched.Add(float64(got))
		if err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("got %d bytes, want %d: %w", got, n, io.ErrUnexpectedEOF)
		}
		var one [1]byte
		if k, _ := io.ReadFull(out.Body, one[:]); k > 0 {
			return &responseError{fmt.Sprintf("a body longer than the %d bytes of the range", n)}
		}
		return nil
	})
}

// checkAnswer checks the status and headers of the answer to a GET of
// bytes [off, off+n) of the object pinned to v.
func checkAnswer(out *s3.GetObjectOutput, v version, off, n int64) error {
	status := 0
	if raw, ok := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response); ok {
		status = raw.StatusCode
	}
	cr := aws.ToString(out.ContentRange)
	switch {
	case status == http.StatusOK && off == 0 && n == v.size && cr == "":
		// The whole object asked for and given: some stores answer a
		// range that covers it all so.
	case status != http.StatusPartialContent:
		return &responseError{fmt.Sprintf("status %d with Content-Range %q to a GET of bytes %d-%d (want 206 Partial Content: a store that ignores Range?)",
			status, cr, off, off+n-1)}
	default:
		first, last, total, ok := parseContentRange(cr)
		switch {
		case !ok:
			return &responseError{fmt.Sprintf("Content-Range %q, want \"bytes %d-%d/%d\"", cr, off, off+n-1, v.size)}
		case total != v.size:
			return changed("the store says %d bytes (Content-Range %q), %d at open", total, cr, v.size)
		case first != off || last != off+n-1:
			return &responseError{fmt.Sprintf("Content-Range %q: bytes %d-%d, not the %d-%d asked for", cr, first, last, off, off+n-1)}
		}
	}
	if l := out.ContentLength; l != nil && *l != n {
		return &responseError{fmt.Sprintf("Content-Length %d to a GET of %d bytes", *l, n)}
	}
	switch {
	case v.etag != "":
		if got := normETag(aws.ToString(out.ETag)); got != v.etag {
			return changed("the answer's ETag is %q, %q at open", got, v.etag)
		}
	case !v.modified.IsZero():
		lm := aws.ToTime(out.LastModified)
		if lm.IsZero() || !lm.Truncate(time.Second).Equal(v.modified) {
			return changed("the answer's Last-Modified is %s, %s at open", httpDate(lm), httpDate(v.modified))
		}
	}
	return nil
}

// parseContentRange parses "bytes FIRST-LAST/TOTAL".
func parseContentRange(s string) (first, last, total int64, ok bool) {
	rest, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return 0, 0, 0, false
	}
	span, size, ok1 := strings.Cut(rest, "/")
	a, b, ok2 := strings.Cut(span, "-")
	if !ok1 || !ok2 {
		return 0, 0, 0, false
	}
	var err1, err2, err3 error
	first, err1 = strconv.ParseInt(a, 10, 64)
	last, err2 = strconv.ParseInt(b, 10, 64)
	total, err3 = strconv.ParseInt(size, 10, 64)
	ok = err1 == nil && err2 == nil && err3 == nil && first >= 0 && last >= first && total > last
	return first, last, total, ok
}

// httpDate shows a time as HTTP headers do; "none" for the zero time.
func httpDate(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.UTC().Format(http.TimeFormat)
}

// fetch reads blocks [i, j] from the store into the backing file; it ends
// with ctx or the store.
func (o *Object) fetch(ctx context.Context, i, j int) error {
	if ctx != o.store.ctx {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		stop := context.AfterFunc(o.store.ctx, cancel)
		defer func() { stop(); cancel() }()
	}
	o.hugeExtents(i, j)
	err := o.store.client.get(ctx, o.loc, o.ver, int64(i)*o.store.opts.BlockSize, o.runBytes(i, j), o.file)
	if err == nil {
		o.journalBlocks(i, j)
	}
	return err
}

// copyBufferBytes is the buffer a GET's body is copied through into the
// cache's file.
const copyBufferBytes = 64 << 10

// copyBuffers are the fetches' copy buffers, reused: a buffer made per GET
// was most of what the daemon allocated while fetching (374 of 442 MB in a
// profile of BenchmarkObjectsScale), and its peak memory grew with the
// GETs made between two collections. A GET takes one once its answer's
// headers are in, for the copy of its body: taken for the whole request,
// each GET in flight held one through the store's latency, 2 MiB live
// with 32 fetchers, which the collector's goal doubles.
var copyBuffers = sync.Pool{New: func() any { return new([copyBufferBytes]byte) }}

// copyBuffersOut counts the copy buffers taken and not yet given back.
var copyBuffersOut atomic.Int64

// ended reports whether err is that of a context that ended.
func ended(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
