package main

import (
	"bytes"
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// TestServeGracefulStop runs the whole program: it serves, answers the
// healthcheck, hands out batches, and on cancellation (SIGTERM's path) ends
// the open stream, removes the ring and the socket, and exits 0.
func TestServeGracefulStop(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "d.sock")
	shm := filepath.Join(dir, "shm")
	os.Mkdir(shm, 0o700)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"serve", "--socket", sock, "--shm-dir", shm, "--log-level", "warn", "--stop-timeout", "5s"}, &bytes.Buffer{}, &stderr)
	}()
	var out bytes.Buffer
	healthy := false
	for i := 0; i < 100 && !healthy; i++ {
		healthy = run(context.Background(), []string{"healthcheck", "--socket", sock, "--timeout", "1s"}, &out, &bytes.Buffer{}) == 0
		if !healthy {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !healthy || !strings.Contains(out.String(), "SERVING") {
		t.Fatalf("daemon never healthy: %s", stderr.String())
	}

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewLoaderClient(conn)
	docs, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(1)), 100, 30, 1)
	cfg := &pb.JobConfig{SeqLen: 7, BatchSize: 2, LogicalShards: 4, BosId: -1,
		Datasets: []*pb.Dataset{{Name: "d", Path: testcorpus.Megatron(t, dir, "d", docs), Format: "megatron", Weight: 1}}}
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	open, err := client.OpenSession(rctx, &pb.OpenSessionRequest{Job: "j", Config: cfg, DpSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	bs, err := client.Batches(rctx)
	if err != nil {
		t.Fatal(err)
	}
	bs.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Attach{Attach: &pb.Attach{SessionId: open.GetSessionId()}}})
	if _, err := bs.Recv(); err != nil {
		t.Fatal(err)
	}

	cancel() // what SIGTERM does to run's context
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit code %d: %s", c, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("daemon did not stop")
	}
	for {
		if _, err := bs.Recv(); err != nil {
			break
		}
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left: %v", err)
	}
	if left, _ := os.ReadDir(shm); len(left) > 0 {
		t.Fatalf("ring files left: %v", left)
	}
}

func TestServeBadFlags(t *testing.T) {
	long := "/tmp/" + strings.Repeat("s", 120)
	cases := map[string][]string{
		"longer than the 107": {"serve", "--socket", long},
		"slots must be in":    {"serve", "--socket", filepath.Join(t.TempDir(), "s"), "--slots", "1"},
		"log_level":           {"serve", "--socket", filepath.Join(t.TempDir(), "s"), "--log-level", "loud"},
		"unknown field":       {"serve", "--config", writeFile(t, `{"sockett": "x"}`)},
	}
	for want, args := range cases {
		var stderr bytes.Buffer
		if c := run(context.Background(), args, &bytes.Buffer{}, &stderr); c == 0 || !strings.Contains(stderr.String(), want) {
			t.Errorf("%v: exit %d, stderr %q, want non-zero and %q", args, c, stderr.String(), want)
		}
	}
	if c := run(context.Background(), []string{"healthcheck", "--socket", filepath.Join(t.TempDir(), "none"), "--timeout", "200ms"}, &bytes.Buffer{}, &bytes.Buffer{}); c != 1 {
		t.Errorf("healthcheck of no daemon: exit %d, want 1", c)
	}
}

func writeFile(t *testing.T, s string) string {
	p := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(p, []byte(s), 0o644)
	return p
}

func TestPrepareUsageAndErrors(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"prepare", "--format", "jsonl"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "missing --input, --tokenizer, --output") {
		t.Fatalf("prepare without flags: exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	dir := t.TempDir()
	code := run(context.Background(), []string{"prepare", "--input", dir, "--format", "jsonl", "--tokenizer", "no_such_encoding",
		"--output", filepath.Join(dir, "out")}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), `tokenizer "no_such_encoding"`) || !strings.Contains(errb.String(), "cl100k_base") {
		t.Fatalf("unknown tokenizer: exit %d, stderr %q", code, errb.String())
	}
}

// TestServeConfigLayers: defaults, then the config file, then flags.
func TestServeConfigLayers(t *testing.T) {
	cfg, err := parseServe(nil, &bytes.Buffer{})
	if err != nil || cfg.CUDALibrary != "libcuda.so.1" || cfg.Slots != 8 || !cfg.BatchScheduling {
		t.Fatalf("defaults: %+v %v", cfg, err)
	}
	file := writeFile(t, `{"cuda_library": "/opt/nvidia/libcuda.so.1", "slots": 4, "batch_scheduling": false}`)
	cfg, err = parseServe([]string{"--config", file}, &bytes.Buffer{})
	if err != nil || cfg.CUDALibrary != "/opt/nvidia/libcuda.so.1" || cfg.Slots != 4 || cfg.BatchScheduling {
		t.Fatalf("from the file: %+v %v", cfg, err)
	}
	cfg, err = parseServe([]string{"--config", file, "--cuda-library", "libcuda.so", "--slots", "16"}, &bytes.Buffer{})
	if err != nil || cfg.CUDALibrary != "libcuda.so" || cfg.Slots != 16 || cfg.BatchScheduling {
		t.Fatalf("flags over the file: %+v %v", cfg, err)
	}
}
