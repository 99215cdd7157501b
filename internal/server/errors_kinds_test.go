package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dataloaderd/dataloaderd/internal/cuda"
	"github.com/dataloaderd/dataloaderd/internal/errkind"
	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/mapped"
	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/ring"
	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/source"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
	"github.com/dataloaderd/dataloaderd/internal/text"
)

// sentinelCode is one error a domain package raises, the code a client has
// always got for it, and rank, the place of its case in the mapping the
// server had before errors carried kinds (a switch over every package's
// sentinels, at 988d3c8): when an error is several of these, the lowest
// rank decides. -1: no case (Internal).
type sentinelCode struct {
	name string
	err  error
	code codes.Code
	rank int
}

// sentinelCodes is every sentinel and typed error the server maps, and a
// few it does not.
var sentinelCodes = []sentinelCode{
	{"context.Canceled", context.Canceled, codes.Canceled, 0},
	{"context.DeadlineExceeded", context.DeadlineExceeded, codes.DeadlineExceeded, 1},
	{"objstore.ErrUnavailable", objstore.ErrUnavailable, codes.Unavailable, 2},
	{"objstore.ErrDenied", objstore.ErrDenied, codes.PermissionDenied, 3},
	{"objstore.ErrBadAnswer", objstore.ErrBadAnswer, codes.InvalidArgument, 4},
	{"objstore.ErrUnversioned", objstore.ErrUnversioned, codes.InvalidArgument, 4},
	{"objstore.ErrBudget", objstore.ErrBudget, codes.ResourceExhausted, 5},
	{"stream.ErrInvalidConfig", stream.ErrInvalidConfig, codes.InvalidArgument, 6},
	{"source.ErrInvalid", source.ErrInvalid, codes.InvalidArgument, 6},
	{"text.BadRecordError", &text.BadRecordError{}, codes.InvalidArgument, 6},
	{"session.ErrBadRequest", session.ErrBadRequest, codes.InvalidArgument, 6},
	{"ring.ErrGeometry", ring.ErrGeometry, codes.InvalidArgument, 6},
	{"cuda.ErrGeometry", cuda.ErrGeometry, codes.InvalidArgument, 6},
	{"stream.ErrUnknownSlot", stream.ErrUnknownSlot, codes.InvalidArgument, 6},
	{"cuda.ErrNoSuchDevice", cuda.ErrNoSuchDevice, codes.InvalidArgument, 6},
	{"state.ErrMismatch", state.ErrMismatch, codes.FailedPrecondition, 7},
	{"state.ErrTooLarge", state.ErrTooLarge, codes.FailedPrecondition, 7},
	{"session.ErrConfigDiffers", session.ErrConfigDiffers, codes.FailedPrecondition, 7},
	{"stream.ErrStep", stream.ErrStep, codes.FailedPrecondition, 7},
	{"session.ErrNoSession", session.ErrNoSession, codes.NotFound, 8},
	{"session.ErrSessionClosed", session.ErrSessionClosed, codes.NotFound, 8},
	{"cuda.ErrRingClosed", cuda.ErrRingClosed, codes.NotFound, 8},
	{"session.ErrSessionExists", session.ErrSessionExists, codes.AlreadyExists, 9},
	{"session.ErrTooMany", session.ErrTooMany, codes.AlreadyExists, 9},
	{"errNoPeer", errNoPeer, codes.Unauthenticated, 10},
	{"files.ErrOutsideRoots", files.ErrOutsideRoots, codes.PermissionDenied, 11},
	{"files.OutsideError", &files.OutsideError{What: "save folder", Path: "/x"}, codes.PermissionDenied, 11},
	{"files.ErrAccess", files.ErrAccess, codes.PermissionDenied, 11},
	{"files.AccessError", &files.AccessError{What: "save folder", Path: "/x", Reason: "no"}, codes.PermissionDenied, 11},
	{"fs.ErrPermission", fs.ErrPermission, codes.PermissionDenied, 11},
	{"EROFS", syscall.EROFS, codes.PermissionDenied, 11},
	{"files.FileError", &files.FileError{Path: "/x", Reason: "not a regular file"}, codes.InvalidArgument, 12},
	{"session.ErrShuttingDown", session.ErrShuttingDown, codes.Unavailable, 13},
	{"stream.ErrClosed", stream.ErrClosed, codes.Unavailable, 13},
	{"session.ErrDaemonRestarted", session.ErrDaemonRestarted, codes.Unavailable, 13},
	{"session.ErrNoTransport", session.ErrNoTransport, codes.Unimplemented, 14},
	{"cuda.ErrNoDriver", cuda.ErrNoDriver, codes.Unimplemented, 14},
	{"mapped.ErrFault", mapped.ErrFault, codes.DataLoss, 15},
	{"mapped.FaultError", &mapped.FaultError{Path: "/x"}, codes.DataLoss, 15},
	{"objstore.ErrChanged", objstore.ErrChanged, codes.DataLoss, 15},
	{"cuda out of memory", &cuda.Error{Call: "cuMemAlloc_v2", Result: cuda.ErrOutOfMemory, Name: cuda.ErrOutOfMemory.Name()}, codes.ResourceExhausted, 16},
	{"cuda.ErrOutOfMemory", cuda.ErrOutOfMemory, codes.ResourceExhausted, 16},
	{"session.ErrOverBudget", session.ErrOverBudget, codes.ResourceExhausted, 16},
	{"ENOSPC", syscall.ENOSPC, codes.ResourceExhausted, 16},
	{"EDQUOT", syscall.EDQUOT, codes.ResourceExhausted, 16},
	{"objstore.ErrObject", objstore.ErrObject, codes.Unavailable, 17},
	{"another error", errors.New("x"), codes.Internal, -1},
	{"objstore.ErrNotFound", objstore.ErrNotFound, codes.Internal, -1},
	{"objstore.ErrInvalidURL", objstore.ErrInvalidURL, codes.Internal, -1},
	{"another cuda error", &cuda.Error{Call: "cuInit", Result: cuda.ErrNoDevice, Name: cuda.ErrNoDevice.Name()}, codes.Internal, -1},
	{"another cuda result", cuda.ErrInvalidValue, codes.Internal, -1},
	{"EIO", syscall.EIO, codes.Internal, -1},
}

// TestSentinelCodes: each error a domain package raises, bare and wrapped
// with a message as its raisers do, gets the code it has always got, with
// its message unchanged.
func TestSentinelCodes(t *testing.T) {
	for _, c := range sentinelCodes {
		for _, err := range []error{c.err, fmt.Errorf("%w: dataset %q", c.err, "web"), fmt.Errorf("open: %w", c.err)} {
			st, _ := status.FromError(toStatus(err))
			if st.Code() != c.code || st.Message() != err.Error() {
				t.Errorf("%s: %q is %v %q, want %v", c.name, err, st.Code(), st.Message(), c.code)
			}
		}
	}
}

// TestSentinelPrecedence: an error that is two of them (a sentinel wrapping
// a cause, errors joined) gets the code of the one whose case came first in
// the server's mapping before kinds: a wrapped object-store failure is the
// store's, a state too large is FailedPrecondition though it wraps a file
// refused, and so on. Every pair, either way round.
func TestSentinelPrecedence(t *testing.T) {
	for _, a := range sentinelCodes {
		for _, b := range sentinelCodes {
			want := a.code
			if a.rank < 0 || (b.rank >= 0 && b.rank < a.rank) {
				want = b.code
			}
			err := fmt.Errorf("%w: %w", a.err, b.err)
			if got := status.Code(toStatus(err)); got != want {
				t.Errorf("%s with %s: %v, want %v", a.name, b.name, got, want)
			}
		}
	}
}

// TestStatusPassesThrough: an error that already is a status keeps it.
func TestStatusPassesThrough(t *testing.T) {
	err := status.Error(codes.Aborted, "aborted")
	if got := toStatus(err); got != err {
		t.Fatalf("toStatus(%v) = %v", err, got)
	}
	if toStatus(nil) != nil {
		t.Fatal("toStatus(nil) is not nil")
	}
}

// TestEveryKindHasACode: a kind added to errkind without a code here would
// reach clients as Internal.
func TestEveryKindHasACode(t *testing.T) {
	for _, k := range errkind.Kinds() {
		if _, ok := codeOf[k]; !ok {
			t.Errorf("kind %v has no code", k)
		}
	}
}
