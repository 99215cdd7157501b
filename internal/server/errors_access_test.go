package server

import (
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

// TestFileAccessCodes: a file or folder refused by the caller's rights,
// or that the daemon's own rights or a read-only file system refuse, is
// PermissionDenied with the error's text (which names the path), not
// Internal; a URL given as a folder is InvalidArgument.
func TestFileAccessCodes(t *testing.T) {
	caller := &files.AccessError{What: "save folder", Path: "/home/t/ckpt", At: "/home/t", Caller: files.Caller{UID: 7},
		Need: files.Search, Inode: files.Inode{Mode: syscall.S_IFDIR | 0o700, UID: 1000}}
	cases := []struct {
		name string
		err  error
		code codes.Code
	}{
		{"the caller's rights", fmt.Errorf("save state: %w", caller), codes.PermissionDenied},
		{"the daemon's rights", fmt.Errorf("save state: %w", &fs.PathError{Op: "mkdir", Path: "/ro/ckpt/dataloader", Err: syscall.EACCES}), codes.PermissionDenied},
		{"EPERM", &fs.PathError{Op: "open", Path: "/ckpt/x", Err: syscall.EPERM}, codes.PermissionDenied},
		{"read-only file system", fmt.Errorf("save state: %w", &fs.PathError{Op: "mkdir", Path: "/ro/ckpt/dataloader", Err: syscall.EROFS}), codes.PermissionDenied},
		{"a URL as a folder", &files.FileError{Path: "s3://b/ckpt", Reason: "save folder: not object storage"}, codes.InvalidArgument},
	}
	for _, c := range cases {
		st, _ := status.FromError(toStatus(c.err))
		if st.Code() != c.code || st.Message() != c.err.Error() {
			t.Errorf("%s: %v: code %v %q, want %v", c.name, c.err, st.Code(), st.Message(), c.code)
		}
	}
}
