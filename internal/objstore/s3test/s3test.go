// Package s3test runs Go tests against a real S3-compatible server: the
// versitygw gateway (github.com/versity/versitygw, Apache-2.0) with its posix
// backend in a temporary directory, one process per Start, on a free port of
// 127.0.0.1. make builds the binary into .tools/versitygw (make test-go passes
// its path in DATALOADERD_S3_SERVER); a plain go test finds it there and skips
// the tests that need it when it is missing, unless CI is set.
//
// The server is stopped, restarted on the same port and directory, or killed
// by the tests themselves; FaultProxy (faults.go) sits in front of it and
// answers a chosen fraction of the requests with 503 SlowDown, or lies as a
// broken or hostile store would (lies.go: sizes, listings that never end,
// Range ignored, other ranges, versions stripped, a replaced object).
package s3test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// EnvServer names the environment variable with the path of the versitygw
// binary; make test-go sets it.
const EnvServer = "DATALOADERD_S3_SERVER"

// toolPath is where make puts the binary, relative to the repository root.
const toolPath = ".tools/versitygw"

const (
	// readyTimeout bounds the wait for a started process to answer.
	readyTimeout = 20 * time.Second
	// stopGrace is how long Stop waits after SIGTERM before it kills.
	stopGrace = 5 * time.Second
	// opTimeout bounds each request the helpers (CreateBucket, Put...) make.
	opTimeout = 60 * time.Second
	// startAttempts is how many free ports Start tries: another process may
	// take the one it found before versitygw binds it.
	startAttempts = 3
)

// Binary returns the path of the versitygw binary: $DATALOADERD_S3_SERVER if
// set, else .tools/versitygw under the repository root (the directory of
// go.mod, found from the working directory up). Without one the test is
// skipped, or fails where $CI is set, since CI must run these tests.
func Binary(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("s3test: working directory: %v", err)
	}
	return binaryFrom(t, wd)
}

// binaryFrom is Binary with the search for the repository root starting at dir.
func binaryFrom(t testing.TB, dir string) string {
	t.Helper()
	if p := os.Getenv(EnvServer); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("s3test: %s=%s: %v", EnvServer, p, err)
		}
		return p
	}
	// make's target is $(TOOLS)/versitygw, an absolute path.
	tried, target := "", toolPath
	if root, ok := repoRoot(dir); ok {
		p := filepath.Join(root, filepath.FromSlash(toolPath))
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
		tried, target = " nor does "+p+" exist", p
	}
	msg := fmt.Sprintf("s3test: no S3 server binary: $%s is not set%s; "+
		"run `make test` or `make test-go` (or `make %s` once) to build versitygw", EnvServer, tried, target)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s", msg)
	}
	t.Skip(msg)
	return ""
}

// repoRoot walks up from dir to the first directory with a go.mod.
func repoRoot(dir string) (string, bool) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", false
	}
	for {
		if st, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && !st.IsDir() {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// Server is one versitygw process serving the directory Dir: each directory
// in it is a bucket and each file below one an object.
type Server struct {
	// Endpoint is the server's URL, http://127.0.0.1:PORT; it stays the
	// same across Stop and Restart.
	Endpoint string
	// AccessKey and SecretKey are the root account's credentials (random for
	// each server), Region the region it signs for.
	AccessKey, SecretKey, Region string
	// Dir is the posix backend's root directory.
	Dir string

	bin     string
	addr    string // 127.0.0.1:PORT
	metaDir string // the sidecar directory of object metadata
	log     *logBuffer

	mu     sync.Mutex
	proc   *process   // the running process; nil when stopped
	client *s3.Client // the helpers' client, made on first use
}

// process is one run of the binary.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been waited for
	err  error         // cmd.Wait's result, set before done closes
}

// Start runs a versitygw server on a free port of 127.0.0.1 over a new
// temporary directory, with random credentials and region us-east-1, and
// waits until it answers a signed request. It stops when the test ends;
// if the test failed, the server's output goes to the test log.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary(t)
	base := t.TempDir()
	s := &Server{
		AccessKey: "S3T" + strings.ToUpper(rand.Text())[:17],
		SecretKey: rand.Text() + rand.Text()[:14],
		Region:    "us-east-1",
		Dir:       filepath.Join(base, "root"),
		bin:       bin,
		metaDir:   filepath.Join(base, "meta"),
	}
	var err error
	if s.log, err = newLogBuffer(filepath.Join(base, "versitygw.log")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{s.Dir, s.metaDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("s3test: %v", err)
		}
	}
	// Registered after t.TempDir, so it runs before the directory's removal.
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("s3test: output of versitygw at %s:\n%s", s.Endpoint, s.log.String())
		}
		s.log.Close()
	})
	for range startAttempts {
		var port int
		if port, err = freePort(); err != nil {
			t.Fatalf("s3test: %v", err)
		}
		s.addr = fmt.Sprintf("127.0.0.1:%d", port)
		s.Endpoint = "http://" + s.addr
		if err = s.launch(); err == nil || !errors.Is(err, errAddrInUse) {
			break
		}
	}
	if err != nil {
		t.Fatalf("s3test: start versitygw: %v\noutput:\n%s", err, s.log.String())
	}
	return s
}

// Stop ends the server: SIGTERM, then SIGKILL if it has not exited within a
// few seconds. It returns once the process is gone; the data stays for
// Restart. Stopping a stopped server does nothing.
func (s *Server) Stop() { s.stop(syscall.SIGTERM) }

// Kill ends the server with SIGKILL at once, as a crash would, and waits for
// it to exit.
func (s *Server) Kill() { s.stop(syscall.SIGKILL) }

func (s *Server) stop(sig os.Signal) {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	fmt.Fprintf(s.log, "=== s3test: versitygw stopped (%v): %v\n", sig, p.err)
}

// Restart starts the server again on the same port over the same directory
// (stopping it first if it runs) and waits until it answers.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	if err := s.launch(); err != nil {
		t.Fatalf("s3test: restart versitygw on %s: %v\noutput:\n%s", s.addr, err, s.log.String())
	}
}

// errAddrInUse marks a process that could not bind its port.
var errAddrInUse = errors.New("address already in use")

// launch starts the process and waits until it serves its own account.
func (s *Server) launch() error {
	// --sidecar keeps object metadata (ETag, content type) in files of its
	// own, so the root need not be on a file system with user xattrs, which
	// the default metadata store requires (tmpfs before Linux 6.6 has none).
	// --keep-alive: versitygw closes every connection after one response
	// without it, unlike S3.
	cmd := exec.Command(s.bin,
		"--port", s.addr,
		"--access", s.AccessKey,
		"--secret", s.SecretKey,
		"--region", s.Region,
		"--keep-alive",
		"posix", "--sidecar", s.metaDir, s.Dir)
	cmd.Env = serverEnv()
	cmd.Stdout = s.log.File()
	cmd.Stderr = s.log.File()
	cmd.WaitDelay = time.Second
	mark := s.log.Total()
	fmt.Fprintf(s.log, "=== s3test: starting versitygw on %s\n", s.addr)
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	if err := s.waitReady(p); err != nil {
		s.Stop()
		if strings.Contains(s.log.Since(mark), "address already in use") {
			return fmt.Errorf("%w: %v", errAddrInUse, err)
		}
		return err
	}
	return nil
}

// waitReady polls the server with a signed ListBuckets until it succeeds.
// A signed request, not just any answer: another server on the port (one
// that took it before this process could) would refuse these credentials.
func (s *Server) waitReady(p *process) error {
	c, err := s.loadClient(func(o *s3.Options) {
		o.RetryMaxAttempts = 1
		// No connection outlives the probe.
		o.HTTPClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(readyTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("versitygw exited before it answered: %v", p.err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.ListBuckets(ctx, &s3.ListBucketsInput{})
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("versitygw did not answer within %v: %v", readyTimeout, lastErr)
}

// serverEnv is this process's environment without the variables versitygw
// reads its settings from, so that a developer's own do not change the
// server the tests get.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "VGW_"), strings.HasPrefix(name, "ROOT_"),
			name == "LOGFILE", name == "WEBHOOK":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
