package server

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
)

// codeOf is the status code of each kind of error. Which kind decides for
// an error of several is errkind's order, not this table's.
var codeOf = map[errkind.Kind]codes.Code{
	errkind.Canceled:           codes.Canceled,
	errkind.DeadlineExceeded:   codes.DeadlineExceeded,
	errkind.ObjectUnavailable:  codes.Unavailable,
	errkind.ObjectDenied:       codes.PermissionDenied,
	errkind.ObjectRefused:      codes.InvalidArgument,
	errkind.ObjectBudget:       codes.ResourceExhausted,
	errkind.Invalid:            codes.InvalidArgument,
	errkind.FailedPrecondition: codes.FailedPrecondition,
	errkind.NotFound:           codes.NotFound,
	errkind.AlreadyExists:      codes.AlreadyExists,
	errkind.Unauthenticated:    codes.Unauthenticated,
	errkind.PermissionDenied:   codes.PermissionDenied,
	errkind.BadFile:            codes.InvalidArgument,
	errkind.Unavailable:        codes.Unavailable,
	errkind.Unimplemented:      codes.Unimplemented,
	errkind.DataLoss:           codes.DataLoss,
	errkind.ResourceExhausted:  codes.ResourceExhausted,
	// Any other failure of object storage: an answer waiting does not
	// change (a wrong region, a bad request), or no store on this daemon;
	// the client tells the store from the daemon by "object storage" in
	// the message.
	errkind.ObjectFailed: codes.Unavailable,
}

// toStatus maps a domain error to the gRPC status a client sees, by the
// kind the error carries (errkind.Of); an error of no kind is Internal. It
// is the only place errors become codes, and the message is the error's.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code, ok := codeOf[errkind.Of(err)]
	if !ok {
		code = codes.Internal
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
