package server

import (
	"context"
	"errors"
	"io/fs"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dataloaderd/dataloaderd/internal/cuda"
	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/mapped"
	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/ring"
	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/source"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// toStatus maps a domain error to the gRPC status a client sees. It is the
// only place errors become codes.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	// Object storage, by what failed: the store past its retries (the
	// client tells it from the daemon by "object storage" in the message),
	// its refusal of the daemon's credentials, an answer refused (past a
	// bound, a listing that never ends) or without a version.
	case errors.Is(err, objstore.ErrUnavailable):
		code = codes.Unavailable
	case errors.Is(err, objstore.ErrDenied):
		code = codes.PermissionDenied
	case errors.Is(err, objstore.ErrBadAnswer), errors.Is(err, objstore.ErrUnversioned):
		code = codes.InvalidArgument
	case errors.Is(err, objstore.ErrBudget):
		code = codes.ResourceExhausted
	case errors.Is(err, stream.ErrInvalidConfig), errors.Is(err, source.ErrInvalid),
		errors.Is(err, session.ErrBadRequest), errors.Is(err, ring.ErrGeometry), errors.Is(err, cuda.ErrGeometry),
		errors.Is(err, stream.ErrUnknownSlot), errors.Is(err, cuda.ErrNoSuchDevice):
		code = codes.InvalidArgument
	case errors.Is(err, state.ErrMismatch), errors.Is(err, state.ErrTooLarge), errors.Is(err, session.ErrConfigDiffers), errors.Is(err, stream.ErrStep):
		code = codes.FailedPrecondition
	case errors.Is(err, session.ErrNoSession), errors.Is(err, cuda.ErrRingClosed):
		code = codes.NotFound
	case errors.Is(err, session.ErrSessionExists), errors.Is(err, session.ErrTooMany):
		code = codes.AlreadyExists
	case errors.Is(err, errNoPeer):
		code = codes.Unauthenticated
	case errors.Is(err, files.ErrOutsideRoots), errors.Is(err, files.ErrAccess),
		errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		code = codes.PermissionDenied
	case errors.As(err, new(*files.FileError)):
		code = codes.InvalidArgument
	case errors.Is(err, session.ErrShuttingDown), errors.Is(err, stream.ErrClosed), errors.Is(err, session.ErrDaemonRestarted):
		code = codes.Unavailable
	case errors.Is(err, session.ErrNoTransport), errors.Is(err, cuda.ErrNoDriver):
		code = codes.Unimplemented
	case errors.Is(err, mapped.ErrFault), errors.Is(err, objstore.ErrChanged):
		code = codes.DataLoss
	case errors.Is(err, cuda.ErrOutOfMemory), errors.Is(err, session.ErrOverBudget),
		errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		code = codes.ResourceExhausted
	case errors.Is(err, objstore.ErrObject):
		// Any other failure of object storage: an answer waiting does not
		// change (a wrong region, a bad request), or no store on this daemon.
		code = codes.Unavailable
	}
	return status.Error(code, err.Error())
}

// errorKind labels the errors_total metric.
func errorKind(err error) string {
	if st, ok := status.FromError(toStatus(err)); ok {
		return st.Code().String()
	}
	return "Unknown"
}
