package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/session"
)

// TestSaveOnAFullDisk: a save into a filesystem with no space left is
// ResourceExhausted saying so, and the session goes on. Before, it was
// Internal.
func TestSaveOnAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounts a small tmpfs, which needs root (CI runs as root)")
	}
	full := filepath.Join(t.TempDir(), "full")
	if err := os.Mkdir(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", full, "tmpfs", 0, "size=4k"); err != nil {
		t.Fatalf("mount a 4 KiB tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(full, 0) })
	write := func(name string, n int) error {
		return os.WriteFile(filepath.Join(full, name), make([]byte, n), 0o600)
	}
	if err := write("filler", 4096); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, session.Config{})
	ctx := ctxT(t)
	o, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "j", Config: d.config(t), DpRank: 0, DpSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.client.SaveState(ctx, &pb.SaveStateRequest{SessionId: o.GetSessionId(), Step: 0, Folder: filepath.Join(full, "ckpt")})
	if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("save onto a full filesystem: %v, want ResourceExhausted saying no space is left", err)
	}
	if _, err := d.client.SaveState(ctx, &pb.SaveStateRequest{SessionId: o.GetSessionId(), Step: 0, Folder: t.TempDir()}); err != nil {
		t.Fatalf("a save elsewhere after: %v", err)
	}
}
