package objstore_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// killedBlocks is the size, in blocks, of the object the child reads.
const killedBlocks = 48

// TestDiskCacheKilled: a process filling a disk cache (this test binary,
// run again as TestDiskCacheKilledChild: reads and prefetches at random
// through an 8-block cache, so fetches, evictions and compactions run all
// the time) is killed with SIGKILL, three times on one directory. Each
// time, what it left (copied) has a journal listing only blocks whose bytes
// on disk are the object's, and a store opened on it serves the object's
// bytes, fetching only the blocks not listed.
func TestDiskCacheKilled(t *testing.T) {
	f := newFixture(t, killedBlocks*block, objstore.Options{})
	dir := t.TempDir()
	rng := rand.New(rand.NewSource(3))
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDiskCacheKilledChild$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "OBJSTORE_KILLED_DIR="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ready := make(chan bool, 1)
		go func() {
			sc := bufio.NewScanner(out)
			ok := false
			for sc.Scan() {
				if !ok && strings.Contains(sc.Text(), "filling") {
					ok = true
					ready <- true
				}
			}
			if !ok {
				ready <- false
			}
		}()
		select {
		case ok := <-ready:
			if !ok {
				cmd.Wait()
				t.Fatalf("round %d: the child ended before it filled the cache", round)
			}
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: the child did not start filling the cache", round)
		}
		time.Sleep(time.Duration(20+rng.Intn(200)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("round %d: the child ended with %v, want killed", round, err)
		}
		live := checkCrashed(t, f, copyDir(t, dir))
		t.Logf("round %d: killed with %d blocks listed", round, len(live))
	}
}

// TestDiskCacheKilledChild is TestDiskCacheKilled's child: it reads the
// object at random through an 8-block cache in OBJSTORE_KILLED_DIR until it
// is killed (or a minute passes).
func TestDiskCacheKilledChild(t *testing.T) {
	dir := os.Getenv("OBJSTORE_KILLED_DIR")
	if dir == "" {
		t.Skip("run by TestDiskCacheKilled")
	}
	s, err := objstore.New(objstore.Options{BlockSize: block, Dir: dir, DiskBytes: 8 * block, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.Open(context.Background(), objstore.Location{Bucket: "bucket", Key: "dir/obj.bin"})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for n, start := 0, time.Now(); time.Since(start) < time.Minute; n++ {
		k := rng.Int63n(killedBlocks - 1)
		o.Prefetch((k+1)*block, block)
		if err := o.Hold(context.Background(), k*block, block); err != nil {
			t.Fatal(err)
		}
		o.Release(k*block, block)
		if n == 50 {
			fmt.Println("filling")
		}
	}
}
