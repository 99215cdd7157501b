package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// Info describes one object, as a listing or HEAD said.
type Info struct {
	Key  string
	Size int64
	// ETag is without its quotes; "" when the store gives none.
	ETag string
	// LastModified is zero when the store gives none.
	LastModified time.Time
}

// client is the S3 API as the cache uses it, with the retry policy: every
// request is one attempt of the SDK (its own retryer is off) inside a loop
// that backs off on throttling, 5xx and transport errors until RetryFor.
type client struct {
	s3       *s3.Client
	conns    *conns // every connection it dials, closed with the store
	retryFor time.Duration
	attempt  time.Duration
	metrics  *Metrics
	// maxPages, maxKeys and maxBytes bound one listing.
	maxPages, maxKeys int
	maxBytes          int64
}

// newClient loads the standard AWS configuration: credentials from the
// environment, the shared config and credentials files (AWS_PROFILE), web
// identity or the instance metadata service; the region from AWS_REGION or
// the config file; the endpoint from AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL
// or endpoint_url in the config file. pathStyle "auto" addresses buckets by
// path when a custom endpoint is set (what S3-compatible stores serve).
func newClient(ctx context.Context, o Options, m *Metrics) (*client, error) {
	dialed := &conns{open: map[*trackedConn]struct{}{}}
	cfg, err := config.LoadDefaultConfig(ctx,
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
		config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConnsPerHost = max(o.Concurrency*2, 16)
			t.MaxResponseHeaderBytes = maxHeaderBytes
			dialed.add(t)
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
		// Wrapped here, not in the configuration, which must stay a
		// BuildableClient (AWS_CA_BUNDLE adds to its transport).
		so.HTTPClient = boundedClient{so.HTTPClient}
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
	return &client{s3: c, conns: dialed, retryFor: o.RetryFor, attempt: o.AttemptTimeout, metrics: m,
		maxPages: o.MaxListPages, maxKeys: o.MaxListKeys, maxBytes: o.MaxListBytes}, nil
}

// boundedClient bounds the body of every answer but an object's bytes
// (which get reads exactly as long as it asked for) to maxAnswerBytes: the
// SDK reads a listing page, or an error's body, whole into memory.
type boundedClient struct{ inner aws.HTTPClient }

func (c boundedClient) Do(req *http.Request) (*http.Response, error) {
	resp, err := c.inner.Do(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	if req.Method == http.MethodGet && req.Header.Get("Range") != "" && resp.StatusCode/100 == 2 {
		return resp, nil
	}
	resp.Body = &boundedBody{ReadCloser: resp.Body, left: maxAnswerBytes}
	return resp, nil
}

// boundedBody fails a read past its bound.
type boundedBody struct {
	io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n > 0 {
			return 0, badAnswer("an answer of more than %d bytes", maxAnswerBytes)
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// do runs one request op with retries; the error names url and op. opened
// says the object was opened (a GET): a 404 then means it is gone.
func (c *client) do(ctx context.Context, kind, url, op string, opened bool, fn func(context.Context) error) error {
	backoff := 50 * time.Millisecond
	start := time.Now()
	deadline := start.Add(c.retryFor)
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
			if errors.Is(err, context.DeadlineExceeded) {
				// The attempt's own timeout, not the caller's deadline.
				err = fmt.Errorf("no answer within %v: %s", c.attempt, err.Error())
			}
			e := &ObjectError{URL: url, Op: op, Err: plain(err, opened), Attempts: attempt}
			if again {
				e.GaveUp = max(time.Since(start), time.Nanosecond)
			}
			return e
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
// why: throttling, a server error (5xx, 408), a wrong answer to a ranged GET
// or the transport (no response: refused, reset, timed out). Other answers
// (403, 404, 412, 400), a changed object and an answer past a bound are
// final.
func retryable(err error) (reason string, again bool) {
	var wrong *responseError
	if errors.As(err, &wrong) {
		return "response", true
	}
	if errors.Is(err, ErrChanged) || errors.Is(err, ErrBadAnswer) || errors.Is(err, errConnsClosed) {
		return "", false
	}
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

// head describes one object.
func (c *client) head(ctx context.Context, loc Location) (Info, error) {
	var info Info
	url := loc.String()
	err := c.do(ctx, "head", url, "head", false, func(ctx context.Context) error {
		out, err := c.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &loc.Bucket, Key: &loc.Key})
		if err != nil {
			return err
		}
		if err := checkInfo(loc, out.ContentLength, aws.ToString(out.ETag)); err != nil {
			return err
		}
		info = Info{Key: loc.Key, Size: *out.ContentLength, ETag: normETag(aws.ToString(out.ETag)), LastModified: aws.ToTime(out.LastModified)}
		return nil
	})
	return info, err
}
