package main

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/memlimit"
)

// TestFitMemory: the daemon's budgets against its cgroup's limit, from its
// flags. Before, the limit was not read: in a 1 GiB cgroup the default ring
// budget was half of the machine's RAM, and legal sessions OOM-killed the
// daemon; deploy/kubernetes-sidecar.yaml gave 6,144 MiB of rings under a
// 4 GiB limit and started.
func TestFitMemory(t *testing.T) {
	parse := func(args ...string) daemonConfig {
		t.Helper()
		cfg, err := parseServe(append([]string{"--shm-dir", t.TempDir()}, args...), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	gib := memlimit.Limit{Bytes: 1 << 30, File: "/sys/fs/cgroup/memory.max"}

	t.Run("defaults fit the limit", func(t *testing.T) {
		mb, err := fitMemory(parse(), gib)
		if err != nil {
			t.Fatal(err)
		}
		if total := mb.ring + mb.tokenCache + mb.objectCache + mb.reserve; total > gib.Bytes {
			t.Fatalf("rings %d + token cache %d + object cache %d + reserve %d MiB exceed 1024 MiB",
				mb.ring>>20, mb.tokenCache>>20, mb.objectCache>>20, mb.reserve>>20)
		}
		if mb.ringFrom != "half of the memory limit" || len(mb.lowered) == 0 {
			t.Fatalf("ring budget from %q, lowered %q", mb.ringFrom, mb.lowered)
		}
	})
	t.Run("flags over the limit refuse the start", func(t *testing.T) {
		_, err := fitMemory(parse("--ring-budget-mb", "6144", "--token-cache-mb", "512", "--object-cache-mb", "256"),
			memlimit.Limit{Bytes: 4 << 30, File: "/sys/fs/cgroup/memory.max"})
		if !errors.Is(err, memlimit.ErrOverLimit) {
			t.Fatalf("6 GiB of rings under 4 GiB: %v", err)
		}
		for _, want := range []string{"--ring-budget-mb 6144 MiB", "--token-cache-mb 512 MiB", "--object-cache-mb 256 MiB", "4096 MiB"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q does not name %q", err, want)
			}
		}
	})
	t.Run("an object cache in a directory is not memory", func(t *testing.T) {
		mb, err := fitMemory(parse("--ring-budget-mb", "512", "--token-cache-mb", "256", "--object-cache-mb", "4096",
			"--object-cache-dir", t.TempDir()), gib)
		if err != nil || mb.ring != 512<<20 || mb.tokenCache != 256<<20 {
			t.Fatalf("%+v, %v", mb, err)
		}
	})
	t.Run("no bucket allowed, no object cache", func(t *testing.T) {
		// Under a limit, a daemon whose jobs may name no s3:// dataset
		// gave a quarter of it to an object cache it never used.
		local := t.TempDir()
		mb, err := fitMemory(parse("--allow-root", local), gib)
		if err != nil || mb.objectCache != 0 {
			t.Fatalf("allow-root %s only: object cache %d MiB, %v", local, mb.objectCache>>20, err)
		}
		withBucket, err := fitMemory(parse("--allow-root", local, "--allow-root", "s3://corpora"), gib)
		if err != nil || withBucket.objectCache == 0 || mb.ring <= withBucket.ring {
			t.Fatalf("with a bucket: object cache %d MiB, rings %d MiB (%d without), %v",
				withBucket.objectCache>>20, withBucket.ring>>20, mb.ring>>20, err)
		}
		if objectsAllowed([]string{local}) || !objectsAllowed(nil) || !objectsAllowed([]string{local, "s3://b/p"}) {
			t.Error("objectsAllowed: a bucket root, or none at all, allows s3:// datasets; local roots alone do not")
		}
	})
	t.Run("no limit, nothing changes", func(t *testing.T) {
		mb, err := fitMemory(parse("--token-cache-mb", "4096"), memlimit.Limit{})
		if err != nil || mb.tokenCache != 4096<<20 || len(mb.lowered) > 0 {
			t.Fatalf("%+v, %v", mb, err)
		}
	})
	t.Run("the reserve is a flag", func(t *testing.T) {
		_, err := fitMemory(parse("--memory-reserve-mb", "2048"), gib)
		if !errors.Is(err, memlimit.ErrOverLimit) || !strings.Contains(err.Error(), "--memory-reserve-mb") {
			t.Fatalf("a reserve of 2 GiB in 1 GiB: %v", err)
		}
	})
}

// TestGoLimit: the Go runtime's soft limit is what the cgroup's limit
// leaves the heap, never below the reserve.
func TestGoLimit(t *testing.T) {
	const mib = 1 << 20
	if got := goLimit(1024*mib, 219*mib, 256*mib, 256*mib); got != 549*mib {
		t.Fatalf("goLimit = %d MiB, want 549", got/mib)
	}
	if got := goLimit(1024*mib, 219*mib, 700*mib, 256*mib); got != 256*mib {
		t.Fatalf("goLimit below the floor = %d MiB, want 256", got/mib)
	}
}
