// The calls a test makes on a running server: an S3 client, buckets and
// objects put, and the environment that points the daemon at it.

package s3test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Client returns an S3 client for the server: its credentials and region,
// path-style addressing at Endpoint. opts apply after those, e.g. to point
// it at a FaultProxy (o.BaseEndpoint) or to change its retries.
func (s *Server) Client(t testing.TB, opts ...func(*s3.Options)) *s3.Client {
	t.Helper()
	c, err := s.loadClient(opts...)
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	return c
}

func (s *Server) loadClient(opts ...func(*s3.Options)) (*s3.Client, error) {
	cfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithRegion(s.Region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, "")),
	)
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	all := append([]func(*s3.Options){func(o *s3.Options) {
		o.BaseEndpoint = aws.String(s.Endpoint)
		o.UsePathStyle = true
	}}, opts...)
	return s3.NewFromConfig(cfg, all...), nil
}

// helperClient is the client of CreateBucket, Put, PutFile and PutDir.
func (s *Server) helperClient(t testing.TB) *s3.Client {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		s.client = s.Client(t)
	}
	return s.client
}

// CreateBucket makes a bucket.
func (s *Server) CreateBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := s.helperClient(t).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("s3test: create bucket %s: %v", name, err)
	}
}

// Put writes data as the object bucket/key.
func (s *Server) Put(t testing.TB, bucket, key string, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_, err := s.helperClient(t).PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(bucket),
		Key:           aws.String(key),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
	})
	if err != nil {
		t.Fatalf("s3test: put s3://%s/%s: %v", bucket, key, err)
	}
}

// PutFile uploads the file at path as the object bucket/key.
func (s *Server) PutFile(t testing.TB, bucket, key, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_, err = s.helperClient(t).PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(bucket),
		Key:           aws.String(key),
		Body:          f,
		ContentLength: aws.Int64(st.Size()),
	})
	if err != nil {
		t.Fatalf("s3test: put %s as s3://%s/%s: %v", path, bucket, key, err)
	}
}

// PutDir uploads every regular file under dir as bucket/prefix+its path
// relative to dir, with '/' between the names. Symbolic links are skipped.
func (s *Server) PutDir(t testing.TB, bucket, prefix, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		s.PutFile(t, bucket, prefix+filepath.ToSlash(rel), path)
		return nil
	})
	if err != nil {
		t.Fatalf("s3test: put %s: %v", dir, err)
	}
}

// Env is the standard AWS environment that lets a process (the daemon under
// test, say) reach the server: credentials, region, the S3 endpoint
// (AWS_ENDPOINT_URL_S3), no EC2 metadata lookups, and an empty session token
// in place of any inherited one. Append it to os.Environ(). The process must
// still use path-style addressing, which no standard variable sets.
func (s *Server) Env() []string { return s.EnvFor(s.Endpoint) }

// EnvFor is Env with another endpoint in AWS_ENDPOINT_URL_S3, e.g. a
// FaultProxy's URL.
func (s *Server) EnvFor(endpoint string) []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_SESSION_TOKEN=",
		"AWS_REGION=" + s.Region,
		"AWS_ENDPOINT_URL_S3=" + endpoint,
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

// SetEnv sets Env's variables in this process for the rest of the test
// (t.Setenv: not in parallel tests).
func (s *Server) SetEnv(t testing.TB) {
	t.Helper()
	for _, kv := range s.Env() {
		name, value, _ := strings.Cut(kv, "=")
		t.Setenv(name, value)
	}
}
