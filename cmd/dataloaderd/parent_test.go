package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestExitWithParentNotTheParent: told to exit with a process that is not
// its parent (the launcher died before the daemon asked the kernel, and the
// daemon was handed to another parent), the daemon refuses to start: it
// would otherwise outlive the launcher for good.
func TestExitWithParentNotTheParent(t *testing.T) {
	var stderr bytes.Buffer
	sock := filepath.Join(t.TempDir(), "d.sock")
	self := strconv.Itoa(os.Getpid()) // never the test's own parent
	code := run(context.Background(), []string{"serve", "--socket", sock, "--exit-with-parent", self}, &bytes.Buffer{}, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "exit_with_parent "+self) || !strings.Contains(stderr.String(), "is not the parent") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("the refused daemon listened: %v", err)
	}
}

// TestExitWithParentLayers: the config key, and the flag over it.
func TestExitWithParentLayers(t *testing.T) {
	file := writeFile(t, `{"exit_with_parent": 42}`)
	if cfg, err := parseServe([]string{"--config", file}, &bytes.Buffer{}); err != nil || cfg.ExitWithParent != 42 {
		t.Fatalf("from the file: %+v %v", cfg, err)
	}
	if cfg, err := parseServe([]string{"--config", file, "--exit-with-parent", "7"}, &bytes.Buffer{}); err != nil || cfg.ExitWithParent != 7 {
		t.Fatalf("flag over the file: %+v %v", cfg, err)
	}
	if cfg, err := parseServe(nil, &bytes.Buffer{}); err != nil || cfg.ExitWithParent != 0 {
		t.Fatalf("default: %+v %v", cfg, err)
	}
}
