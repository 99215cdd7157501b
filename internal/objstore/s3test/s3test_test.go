package s3test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// payload is n bytes that differ at every offset a test reads.
func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// noRetry makes a client try each request once.
func noRetry(o *s3.Options) { o.RetryMaxAttempts = 1 }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func getRange(t *testing.T, c *s3.Client, bucket, key, rng string) ([]byte, *s3.GetObjectOutput) {
	t.Helper()
	out, err := c.GetObject(ctxT(t), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Range: aws.String(rng)})
	if err != nil {
		t.Fatalf("get s3://%s/%s range %s: %v", bucket, key, rng, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("read s3://%s/%s: %v", bucket, key, err)
	}
	return b, out
}

func listKeys(t *testing.T, c *s3.Client, bucket, prefix string, pageSize int32) []string {
	t.Helper()
	in := &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)}
	if pageSize > 0 {
		in.MaxKeys = aws.Int32(pageSize)
	}
	var keys []string
	pages := s3.NewListObjectsV2Paginator(c, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctxT(t))
		if err != nil {
			t.Fatalf("list s3://%s/%s: %v", bucket, prefix, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys
}

func TestServerObjects(t *testing.T) {
	t.Parallel()
	s := Start(t)
	if !strings.HasPrefix(s.Endpoint, "http://127.0.0.1:") || s.AccessKey == "" || s.SecretKey == "" || s.Region != "us-east-1" {
		t.Fatalf("server fields: %+v", s)
	}
	s.CreateBucket(t, "data")
	data := payload(100_000)
	s.Put(t, "data", "shards/a.bin", data)
	s.Put(t, "data", "shards/b.bin", []byte("bee"))
	s.Put(t, "data", "shardsX/c.bin", []byte("not under shards/"))
	s.Put(t, "data", "other/d.bin", []byte("dee"))
	c := s.Client(t)

	got, out := getRange(t, c, "data", "shards/a.bin", "bytes=1000-1999")
	if !bytes.Equal(got, data[1000:2000]) {
		t.Fatalf("range 1000-1999: got %d bytes, want data[1000:2000]", len(got))
	}
	if cr := aws.ToString(out.ContentRange); cr != "bytes 1000-1999/100000" {
		t.Errorf("Content-Range %q", cr)
	}
	if got, _ := getRange(t, c, "data", "shards/a.bin", "bytes=99990-"); !bytes.Equal(got, data[99990:]) {
		t.Errorf("open range: got %d bytes, want the last 10", len(got))
	}
	if got, _ := getRange(t, c, "data", "shards/a.bin", "bytes=-5"); !bytes.Equal(got, data[len(data)-5:]) {
		t.Errorf("suffix range: got %d bytes, want the last 5", len(got))
	}

	head, err := c.HeadObject(ctxT(t), &s3.HeadObjectInput{Bucket: aws.String("data"), Key: aws.String("shards/a.bin")})
	if err != nil {
		t.Fatal(err)
	}
	if n := aws.ToInt64(head.ContentLength); n != int64(len(data)) {
		t.Errorf("HeadObject size %d, want %d", n, len(data))
	}
	sum := md5.Sum(data)
	if etag, want := aws.ToString(head.ETag), `"`+hex.EncodeToString(sum[:])+`"`; etag != want {
		t.Errorf("ETag %s, want the MD5 %s", etag, want)
	}

	want := []string{"shards/a.bin", "shards/b.bin"}
	if keys := listKeys(t, c, "data", "shards/", 0); !slices.Equal(keys, want) {
		t.Errorf("list shards/: %q, want %q", keys, want)
	}
	if keys := listKeys(t, c, "data", "shards/", 1); !slices.Equal(keys, want) {
		t.Errorf("list shards/ a key a page: %q, want %q", keys, want)
	}
	all := []string{"other/d.bin", "shards/a.bin", "shards/b.bin", "shardsX/c.bin"}
	if keys := listKeys(t, c, "data", "", 0); !slices.Equal(keys, all) {
		t.Errorf("list all: %q, want %q", keys, all)
	}

	_, err = c.HeadObject(ctxT(t), &s3.HeadObjectInput{Bucket: aws.String("data"), Key: aws.String("shards/none")})
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "NotFound" {
		t.Errorf("HeadObject of a missing key: %v, want NotFound", err)
	}
}

func TestPutFileAndDir(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.CreateBucket(t, "files")
	dir := t.TempDir()
	files := map[string][]byte{
		"top.txt":         []byte("top"),
		"sub/one.bin":     payload(3000),
		"sub/deep/two.gz": payload(17),
		"empty":           nil,
	}
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "top.txt"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	s.PutDir(t, "files", "ds/v1/", dir)
	s.PutFile(t, "files", "single", filepath.Join(dir, "sub", "one.bin"))

	c := s.Client(t)
	want := []string{"ds/v1/empty", "ds/v1/sub/deep/two.gz", "ds/v1/sub/one.bin", "ds/v1/top.txt"}
	if keys := listKeys(t, c, "files", "ds/", 0); !slices.Equal(keys, want) {
		t.Fatalf("PutDir keys %q, want %q", keys, want)
	}
	for name, b := range files {
		out, err := c.GetObject(ctxT(t), &s3.GetObjectInput{Bucket: aws.String("files"), Key: aws.String("ds/v1/" + name)})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(out.Body)
		out.Body.Close()
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("%s: %d bytes (%v), want %d", name, len(got), err, len(b))
		}
	}
	if got, _ := getRange(t, c, "files", "single", "bytes=0-2999"); !bytes.Equal(got, files["sub/one.bin"]) {
		t.Errorf("PutFile object differs")
	}
}

func TestStopRestart(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.CreateBucket(t, "keep")
	data := payload(5000)
	s.Put(t, "keep", "obj", data)
	endpoint := s.Endpoint
	c := s.Client(t, noRetry)

	s.Stop()
	_, err := c.HeadObject(ctxT(t), &s3.HeadObjectInput{Bucket: aws.String("keep"), Key: aws.String("obj")})
	var apiErr smithy.APIError
	if err == nil || errors.As(err, &apiErr) {
		t.Fatalf("HeadObject of a stopped server: %v, want a connection error", err)
	}
	s.Stop() // stopping a stopped server does nothing

	s.Restart(t)
	if s.Endpoint != endpoint {
		t.Fatalf("endpoint moved from %s to %s", endpoint, s.Endpoint)
	}
	if got, _ := getRange(t, c, "keep", "obj", "bytes=10-19"); !bytes.Equal(got, data[10:20]) {
		t.Fatalf("after restart: %v, want data[10:20]", got)
	}

	// A crash and a restart of a running server.
	s.Put(t, "keep", "obj2", []byte("second"))
	s.Kill()
	if _, err := c.ListBuckets(ctxT(t), &s3.ListBucketsInput{}); err == nil {
		t.Fatal("ListBuckets of a killed server succeeded")
	}
	s.Restart(t)
	s.Restart(t)
	if keys := listKeys(t, c, "keep", "", 0); !slices.Equal(keys, []string{"obj", "obj2"}) {
		t.Fatalf("after kill and restarts: %q", keys)
	}
}

// TestEnv reaches the server from the standard environment alone, as a
// process given Env would.
func TestEnv(t *testing.T) {
	s := Start(t)
	s.CreateBucket(t, "envb")
	t.Setenv("AWS_SESSION_TOKEN", "inherited-token-that-must-not-be-used")
	s.SetEnv(t)
	for _, kv := range s.Env() {
		name, value, _ := strings.Cut(kv, "=")
		if got := os.Getenv(name); got != value {
			t.Fatalf("%s=%q after SetEnv, want %q", name, got, value)
		}
	}
	if !slices.Contains(s.Env(), "AWS_ENDPOINT_URL_S3="+s.Endpoint) || !slices.Contains(s.Env(), "AWS_EC2_METADATA_DISABLED=true") {
		t.Fatalf("Env: %q", s.Env())
	}
	cfg, err := config.LoadDefaultConfig(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
	out, err := c.ListBuckets(ctxT(t), &s3.ListBucketsInput{})
	if err != nil {
		t.Fatalf("ListBuckets with the environment only: %v", err)
	}
	if len(out.Buckets) != 1 || aws.ToString(out.Buckets[0].Name) != "envb" {
		t.Fatalf("buckets %v", out.Buckets)
	}
}

func TestFaultProxy(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.CreateBucket(t, "faults")
	data := payload(4096)
	s.Put(t, "faults", "k", data)

	p := NewFaultProxy(t, s.Endpoint, 1.0, 7)
	c := s.Client(t, noRetry, func(o *s3.Options) { o.BaseEndpoint = aws.String(p.URL) })
	_, err := c.GetObject(ctxT(t), &s3.GetObjectInput{Bucket: aws.String("faults"), Key: aws.String("k"), Range: aws.String("bytes=0-9")})
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "SlowDown" {
		t.Fatalf("GetObject through a refusing proxy: %v, want SlowDown", err)
	}
	var respErr *awshttp.ResponseError
	if !errors.As(err, &respErr) || respErr.HTTPStatusCode() != 503 {
		t.Fatalf("GetObject through a refusing proxy: %v, want HTTP 503", err)
	}
	// A refused PUT: the body is read and dropped, the answer arrives.
	_, err = c.PutObject(ctxT(t), &s3.PutObjectInput{Bucket: aws.String("faults"), Key: aws.String("refused"), Body: bytes.NewReader(payload(1 << 20))})
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "SlowDown" {
		t.Fatalf("PutObject through a refusing proxy: %v, want SlowDown", err)
	}
	if p.Requests() != 2 || p.Refused() != 2 || p.Forwarded() != 0 {
		t.Fatalf("counters %d/%d/%d, want 2 requests, 2 refused, 0 forwarded", p.Requests(), p.Refused(), p.Forwarded())
	}

	// Fraction 0 forwards every request, signatures intact (the server sees
	// the Host the client signed), keys with characters that need escaping
	// included.
	p.SetFraction(0)
	if got, _ := getRange(t, c, "faults", "k", "bytes=100-199"); !bytes.Equal(got, data[100:200]) {
		t.Fatalf("through the proxy: %d bytes, want data[100:200]", len(got))
	}
	odd := "dir with space/a+b=c&d%e~(1).bin"
	if _, err := c.PutObject(ctxT(t), &s3.PutObjectInput{Bucket: aws.String("faults"), Key: aws.String(odd), Body: bytes.NewReader([]byte("odd"))}); err != nil {
		t.Fatalf("PutObject through the proxy: %v", err)
	}
	if got, _ := getRange(t, c, "faults", odd, "bytes=0-2"); string(got) != "odd" {
		t.Fatalf("odd key through the proxy: %q", got)
	}
	if keys := listKeys(t, c, "faults", "dir with", 0); !slices.Equal(keys, []string{odd}) {
		t.Fatalf("list through the proxy: %q", keys)
	}
	if p.Refused() != 2 || p.Forwarded() != p.Requests()-2 || p.Forwarded() < 4 {
		t.Fatalf("counters %d/%d/%d after fraction 0", p.Requests(), p.Refused(), p.Forwarded())
	}

	// A stopped server behind the proxy is a 502.
	s.Stop()
	_, err = c.HeadObject(ctxT(t), &s3.HeadObjectInput{Bucket: aws.String("faults"), Key: aws.String("k")})
	if !errors.As(err, &respErr) || respErr.HTTPStatusCode() != 502 {
		t.Fatalf("HeadObject through the proxy to a stopped server: %v, want HTTP 502", err)
	}
	s.Restart(t)
	if _, err := c.HeadObject(ctxT(t), &s3.HeadObjectInput{Bucket: aws.String("faults"), Key: aws.String("k")}); err != nil {
		t.Fatalf("HeadObject through the proxy after restart: %v", err)
	}
}

// TestFaultProxyRetried: the SDK's retries get every request through a proxy
// that refuses some, and the pattern follows from the seed.
func TestFaultProxyRetried(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.CreateBucket(t, "retry")
	data := payload(1000)
	s.Put(t, "retry", "k", data)

	pattern := func(seed int64) []bool {
		p := NewFaultProxy(t, s.Endpoint, 0.3, seed)
		c := s.Client(t, noRetry, func(o *s3.Options) { o.BaseEndpoint = aws.String(p.URL) })
		var refused []bool
		for range 40 {
			_, err := c.HeadObject(ctxT(t), &s3.HeadObjectInput{Bucket: aws.String("retry"), Key: aws.String("k")})
			refused = append(refused, err != nil)
		}
		if int64(len(refused)) != p.Requests() {
			t.Fatalf("%d requests counted, %d made", p.Requests(), len(refused))
		}
		return refused
	}
	a, b, other := pattern(42), pattern(42), pattern(43)
	if !slices.Equal(a, b) {
		t.Fatalf("seed 42 refused\n%v\nthen\n%v", a, b)
	}
	if slices.Equal(a, other) {
		t.Fatalf("seeds 42 and 43 refused the same requests: %v", a)
	}
	n := 0
	for _, r := range a {
		if r {
			n++
		}
	}
	if n < 4 || n > 20 {
		t.Fatalf("%d of 40 refused at fraction 0.3", n)
	}

	p := NewFaultProxy(t, s.Endpoint, 0.3, 1)
	c := s.Client(t, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(p.URL)
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = 20
			so.RateLimiter = ratelimit.None
			so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		})
	})
	for i := range 30 {
		if got, _ := getRange(t, c, "retry", "k", "bytes=10-19"); !bytes.Equal(got, data[10:20]) {
			t.Fatalf("request %d: %v", i, got)
		}
	}
	if p.Refused() == 0 || p.Forwarded() != 30 || p.Requests() != p.Refused()+p.Forwarded() {
		t.Fatalf("counters %d/%d/%d", p.Requests(), p.Refused(), p.Forwarded())
	}
}

// fakeTB records Skip and Fatalf, which end the goroutine as testing's do.
type fakeTB struct {
	testing.TB
	skipped, fatal string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skip(args ...any) {
	f.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// binaryIn runs binaryFrom(dir) with a fake test.
func binaryIn(dir string) (path string, f *fakeTB) {
	f = &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		path = binaryFrom(f, dir)
	}()
	<-done
	return path, f
}

func TestBinary(t *testing.T) {
	repo := t.TempDir()
	if err := os.WriteFile(filepath.Join(repo, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(repo, "internal", "pkg")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}

	t.Setenv(EnvServer, "")
	t.Setenv("CI", "")
	if p, f := binaryIn(sub); p != "" || !strings.Contains(f.skipped, "make "+filepath.Join(repo, ".tools", "versitygw")) || f.fatal != "" {
		t.Fatalf("no binary: path %q, skipped %q, fatal %q", p, f.skipped, f.fatal)
	}
	t.Setenv("CI", "true")
	if p, f := binaryIn(sub); p != "" || !strings.Contains(f.fatal, "make test") || f.skipped != "" {
		t.Fatalf("no binary under CI: path %q, skipped %q, fatal %q", p, f.skipped, f.fatal)
	}

	tool := filepath.Join(repo, ".tools", "versitygw")
	if err := os.MkdirAll(filepath.Dir(tool), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tool, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if p, f := binaryIn(sub); p != tool || f.skipped != "" || f.fatal != "" {
		t.Fatalf("tool in the repository: path %q, want %q (skipped %q, fatal %q)", p, tool, f.skipped, f.fatal)
	}

	other := filepath.Join(t.TempDir(), "vgw")
	if err := os.WriteFile(other, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvServer, other)
	if p, f := binaryIn(sub); p != other || f.fatal != "" {
		t.Fatalf("%s set: path %q, want %q (fatal %q)", EnvServer, p, other, f.fatal)
	}
	t.Setenv(EnvServer, other+".missing")
	if p, f := binaryIn(sub); p != "" || !strings.Contains(f.fatal, EnvServer) {
		t.Fatalf("%s naming no file: path %q, fatal %q", EnvServer, p, f.fatal)
	}
}

func TestLogBuffer(t *testing.T) {
	b, err := newLogBuffer(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	chunk := strings.Repeat("x", 1000) + "\n"
	for range 3 * logLimit / len(chunk) {
		b.Write([]byte(chunk))
	}
	mark := b.Total()
	b.Write([]byte("last line\n"))
	if got := b.Since(mark); got != "last line\n" {
		t.Fatalf("Since: %q", got)
	}
	s := b.String()
	if len(s) > 2*logLimit+100 || !strings.HasPrefix(s, "[... ") || !strings.HasSuffix(s, "last line\n") {
		t.Fatalf("String: %d bytes, starts %q", len(s), s[:40])
	}
}
