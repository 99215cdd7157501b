package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// ErrObject marks an object that could not be listed or read, after the
// retries: the error names it.
var ErrObject = errors.New("object storage")

// ObjectError is a failed operation on one object or prefix.
type ObjectError struct {
	URL string // s3://bucket/key
	Op  string // "list", "head", "get bytes A-B"
	Err error
	// Attempts is how many requests were made, retries included.
	Attempts int
}

func (e *ObjectError) Error() string {
	tries := ""
	if e.Attempts > 1 {
		tries = fmt.Sprintf(" (%d attempts)", e.Attempts)
	}
	return fmt.Sprintf("%v: %s %s%s: %v", ErrObject, e.Op, e.URL, tries, e.Err)
}

func (e *ObjectError) Unwrap() []error { return []error{ErrObject, e.Err} }

// ErrNotFound: no such object (or bucket).
var ErrNotFound = errors.New("not found")

// ErrChanged: the object was replaced after it was opened; its bytes are no
// longer the ones the dataset was opened with.
var ErrChanged = errors.New("object changed since it was opened (replaced while in use?)")

// Info describes one object.
type Info struct {
	Key  string
	Size int64
	ETag string
}

// client is the S3 API as the cache uses it, with the retry policy: every
// request is one attempt of the SDK (its own retryer is off) inside a loop
// that backs off on throttling, 5xx and transport errors until RetryFor.
type client struct {
	s3       *s3.Client
	idle     *idleConns
	retryFor time.Duration
	attempt  time.Duration
	metrics  *Metrics
}

// newClient loads the standard AWS configuration: credentials from the
// environment, the shared config and credentials files (AWS_PROFILE), web
// identity or the instance metadata service; the region from AWS_REGION or
// the config file; the endpoint from AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL
// or endpoint_url in the config file. pathStyle "auto" addresses buckets by
// path when a custom endpoint is set (what S3-compatible stores serve).
func newClient(ctx context.Context, o Options, m *Metrics) (*client, error) {
	idle := &idleConns{}
	cfg, err := config.LoadDefaultConfig(ctx,
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
		config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConnsPerHost = max(o.Concurrency*2, 16)
			idle.add(t)
		})),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: AWS configuration: %w", ErrObject, err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	var pathErr error
	c := s3.NewFromConfig(cfg, func(so *s3.Options) {
		switch o.PathStyle {
		case "", "auto":
			so.UsePathStyle = so.BaseEndpoint != nil && *so.BaseEndpoint != ""
		case "true":
			so.UsePathStyle = true
		case "false":
		default:
			pathErr = fmt.Errorf("%w: path style %q: want auto, true or false", ErrObject, o.PathStyle)
		}
		// Checksums only where the API requires them: S3-compatible stores
		// differ in the newer checksum headers, and ranged reads carry none.
		so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	if pathErr != nil {
		return nil, pathErr
	}
	return &client{s3: c, idle: idle, retryFor: o.RetryFor, attempt: o.AttemptTimeout, metrics: m}, nil
}

// idleConns are the transports the SDK built, whose idle connections the
// store closes when it closes (a server shutting down gracefully waits
// for them).
type idleConns struct {
	mu         sync.Mutex
	transports []*http.Transport
}

func (c *idleConns) add(t *http.Transport) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.transports = append(c.transports, t)
}

func (c *idleConns) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.transports {
		t.CloseIdleConnections()
	}
}

// do runs one request op with retries; the error names url and op.
func (c *client) do(ctx context.Context, kind, url, op string, fn func(context.Context) error) error {
	backoff := 50 * time.Millisecond
	deadline := time.Now().Add(c.retryFor)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, c.attempt)
		err := fn(actx)
		cancel()
		if err == nil {
			c.metrics.request(kind, "ok")
			return nil
		}
		if ctx.Err() != nil {
			c.metrics.request(kind, "error")
			return &ObjectError{URL: url, Op: op, Err: ctx.Err(), Attempts: attempt}
		}
		reason, again := retryable(err)
		wait := backoff/2 + rand.N(backoff/2+1)
		if !again || time.Now().Add(wait).After(deadline) {
			c.metrics.request(kind, "error")
			return &ObjectError{URL: url, Op: op, Err: plain(err), Attempts: attempt}
		}
		c.metrics.request(kind, "retry_"+reason)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return &ObjectError{URL: url, Op: op, Err: ctx.Err(), Attempts: attempt}
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// throttleCodes are the error codes S3 and compatible stores answer when
// asked to slow down.
var throttleCodes = map[string]bool{
	"SlowDown": true, "Throttling": true, "ThrottlingException": true, "TooManyRequests": true,
	"RequestLimitExceeded": true, "RequestThrottled": true,
	// 400 RequestTimeout: the connection was idle too long mid-request.
	"RequestTimeout": true, "RequestTimeoutException": true,
}

// retryable says whether a failed attempt may succeed if made again, and
// why: throttling, a server error (5xx, 408) or the transport (no response:
// refused, reset, timed out). Other answers (403, 404, 412, 400) are final.
func retryable(err error) (reason string, again bool) {
	var api smithy.APIError
	if errors.As(err, &api) && throttleCodes[api.ErrorCode()] {
		return "throttled", true
	}
	var resp *awshttp.ResponseError
	// A request that got no answer (refused, reset) reports status 0.
	if errors.As(err, &resp) && resp.HTTPStatusCode() != 0 {
		switch code := resp.HTTPStatusCode(); {
		case code == http.StatusTooManyRequests:
			return "throttled", true
		case code >= 500 || code == http.StatusRequestTimeout:
			return "server", true
		}
		return "", false
	}
	var local *localError
	if errors.As(err, &local) {
		return "", false // the cache's own disk: fetching again will not help
	}
	// A canceled request here is the attempt's own timeout (do checks the
	// caller's context first): a hung connection, tried again.
	return "transport", true
}

// plain turns the SDK's notice of a missing object into ErrNotFound and of a
// failed If-Match into ErrChanged; other errors stay as they are.
func plain(err error) error {
	var resp *awshttp.ResponseError
	if errors.As(err, &resp) {
		switch resp.HTTPStatusCode() {
		case http.StatusNotFound:
			return fmt.Errorf("%w: %w", ErrNotFound, err)
		case http.StatusPreconditionFailed:
			return fmt.Errorf("%w: %w", ErrChanged, err)
		}
	}
	return err
}

// localError is a failed write into the cache's backing file.
type localError struct{ err error }

func (e *localError) Error() string { return "object cache: " + e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// localWriter marks the errors of writing into the cache as local.
type localWriter struct{ w io.WriterAt }

func (l localWriter) WriteAt(p []byte, off int64) (int, error) {
	n, err := l.w.WriteAt(p, off)
	if err != nil {
		err = &localError{err}
	}
	return n, err
}

// head describes one object.
func (c *client) head(ctx context.Context, loc Location) (Info, error) {
	var info Info
	err := c.do(ctx, "head", loc.String(), "head", func(ctx context.Context) error {
		out, err := c.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &loc.Bucket, Key: &loc.Key})
		if err != nil {
			return err
		}
		info = Info{Key: loc.Key, Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag)}
		return nil
	})
	return info, err
}

// list lists the objects whose keys start with prefix, sorted by key. With
// flat false it stops at the next "/" after the prefix (one level, as a
// directory listing would).
func (c *client) list(ctx context.Context, bucket, prefix string, flat bool) ([]Info, error) {
	var out []Info
	in := &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: &prefix}
	if !flat {
		in.Delimiter = aws.String("/")
	}
	url := Location{Bucket: bucket, Key: prefix}.String()
	for {
		var page *s3.ListObjectsV2Output
		err := c.do(ctx, "list", url, "list", func(ctx context.Context) error {
			var err error
			page, err = c.s3.ListObjectsV2(ctx, in)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			out = append(out, Info{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), ETag: aws.ToString(o.ETag)})
		}
		if !aws.ToBool(page.IsTruncated) || page.NextContinuationToken == nil {
			break
		}
		in.ContinuationToken = page.NextContinuationToken
	}
	return out, nil
}

// get writes bytes [off, off+n) of the object to w at the same offsets,
// refusing an object whose ETag is no longer etag.
func (c *client) get(ctx context.Context, loc Location, etag string, off, n int64, w io.WriterAt, buf []byte) error {
	rng := fmt.Sprintf("bytes=%d-%d", off, off+n-1)
	op := "get " + strings.TrimPrefix(rng, "bytes=")
	return c.do(ctx, "get", loc.String(), op, func(ctx context.Context) error {
		in := &s3.GetObjectInput{Bucket: &loc.Bucket, Key: &loc.Key, Range: &rng}
		if etag != "" {
			in.IfMatch = &etag
		}
		out, err := c.s3.GetObject(ctx, in)
		if err != nil {
			return err
		}
		defer out.Body.Close()
		got, err := io.CopyBuffer(io.NewOffsetWriter(localWriter{w}, off), io.LimitReader(out.Body, n), buf)
		c.metrics.fetched.Add(float64(got))
		if err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("got %d bytes, want %d: %w", got, n, io.ErrUnexpectedEOF)
		}
		return nil
	})
}
