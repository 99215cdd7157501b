// Package errkind names the kinds of failure the daemon's packages report,
// so that the one place that turns an error into a client's status code
// (internal/server) reads the kind an error carries instead of importing
// every package that can raise one. containerd's errdefs is the model: a
// kind is itself an error, a package declares its sentinels with New, and
// errors.Is(err, errkind.NotFound) holds for every error that wraps one of
// them. The package imports nothing of the daemon's own: every package may
// import it.
//
// An error may carry several kinds (a sentinel wrapping a cause of another
// kind, or errors joined). Of then gives the one that decides: the first
// in the order of the Kind constants. That order is the precedence the
// server's mapping has always applied; change it and clients see other
// codes (internal/server/errors_test.go holds it).
package errkind

import (
	"context"
	"errors"
	"io/fs"
	"strconv"
	"syscall"
)

// Kind is a kind of failure. The constants are in precedence order: when an
// error is of several kinds, the first listed decides.
type Kind uint8

// The kinds, first to last. The code each becomes is the server's
// (internal/server/errors.go); it is given here to say what a kind means.
const (
	// Unknown: no kind; the server answers Internal.
	Unknown Kind = iota
	// Canceled: the caller's context was cancelled (context.Canceled).
	Canceled
	// DeadlineExceeded: a deadline passed (context.DeadlineExceeded).
	DeadlineExceeded
	// ObjectUnavailable: object storage kept failing past its retries.
	// The store's verdicts come before the daemon's own kinds: they say
	// what an open or a read of a dataset met, whatever wraps them.
	ObjectUnavailable
	// ObjectDenied: the object store refused the daemon's credentials.
	ObjectDenied
	// ObjectRefused: the store's answer was refused (past a bound, a
	// listing without end) or gives no version.
	ObjectRefused
	// ObjectBudget: an object does not fit the object cache's bounds.
	ObjectBudget
	// Invalid: a request, config, dataset or geometry the daemon refuses
	// (InvalidArgument).
	Invalid
	// FailedPrecondition: what is asked does not fit what exists: a state
	// of another config or too large, a group opened with another config,
	// a step the pipeline cannot give.
	FailedPrecondition
	// NotFound: no such session, or its ring is gone.
	NotFound
	// AlreadyExists: the session is open and takes no more consumers.
	AlreadyExists
	// Unauthenticated: the caller's user is not known.
	Unauthenticated
	// PermissionDenied: a path outside the allowed roots, a checkpoint
	// folder the caller may not use; also fs.ErrPermission and EROFS.
	PermissionDenied
	// BadFile: a file the daemon cannot use (not regular, too large); it
	// comes after PermissionDenied and the kinds before it, so that what
	// wraps such a file's error decides.
	BadFile
	// Unavailable: the daemon is stopping, restarted, or the pipeline is
	// closed.
	Unavailable
	// Unimplemented: a transport this daemon does not serve (no CUDA
	// driver).
	Unimplemented
	// DataLoss: a mapped file or an object changed under the daemon.
	DataLoss
	// ResourceExhausted: past a budget or out of device memory; also ENOSPC
	// and EDQUOT.
	ResourceExhausted
	// ObjectFailed: any other failure of object storage (an answer that a
	// wait does not change, no store on this daemon): last, so that the
	// kinds above say why when the error carries one.
	ObjectFailed

	numKinds
)

var names = [numKinds]string{
	Unknown:            "unknown",
	Canceled:           "canceled",
	DeadlineExceeded:   "deadline exceeded",
	ObjectUnavailable:  "object storage unavailable",
	ObjectDenied:       "object storage denied",
	ObjectRefused:      "object storage answer refused",
	ObjectBudget:       "object over the cache's bounds",
	Invalid:            "invalid argument",
	FailedPrecondition: "failed precondition",
	NotFound:           "not found",
	AlreadyExists:      "already exists",
	Unauthenticated:    "unauthenticated",
	PermissionDenied:   "permission denied",
	BadFile:            "bad file",
	Unavailable:        "unavailable",
	Unimplemented:      "unimplemented",
	DataLoss:           "data loss",
	ResourceExhausted:  "resource exhausted",
	ObjectFailed:       "object storage failed",
}

// std are the standard library's errors that are of a kind without being
// marked: the context's ends and the system's refusals.
var std = [numKinds][]error{
	Canceled:          {context.Canceled},
	DeadlineExceeded:  {context.DeadlineExceeded},
	PermissionDenied:  {fs.ErrPermission, syscall.EROFS},
	ResourceExhausted: {syscall.ENOSPC, syscall.EDQUOT},
}

// Kinds is every kind but Unknown, in precedence order.
func Kinds() []Kind {
	ks := make([]Kind, 0, numKinds-1)
	for k := Unknown + 1; k < numKinds; k++ {
		ks = append(ks, k)
	}
	return ks
}

// String is the kind's name.
func (k Kind) String() string {
	if k < numKinds {
		return names[k]
	}
	return "kind " + strconv.Itoa(int(k))
}

// Error makes a kind an error, so that errors.Is(err, kind) asks whether
// err carries it.
func (k Kind) Error() string { return k.String() }

// sentinel is an error with its own text that is of one kind.
type sentinel struct {
	kind Kind
	text string
}

func (s *sentinel) Error() string { return s.text }

// Is makes errors.Is(s, s.kind) true.
func (s *sentinel) Is(target error) bool {
	k, ok := target.(Kind)
	return ok && k == s.kind
}

// New is a sentinel error of kind k whose text is text: each call gives a
// distinct error, which errors.Is tells apart as errors.New's are, and
// which is also of kind k.
func New(k Kind, text string) error { return &sentinel{kind: k, text: text} }

// Of is the kind that decides for err: of the kinds err carries (by
// errors.Is, and the standard errors each kind covers), the first in
// precedence order; Unknown for nil or an error of no kind.
func Of(err error) Kind {
	if err == nil {
		return Unknown
	}
	for k := Unknown + 1; k < numKinds; k++ {
		if errors.Is(err, k) {
			return k
		}
		for _, e := range std[k] {
			if errors.Is(err, e) {
				return k
			}
		}
	}
	return Unknown
}
