package server

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/source"
)

// TestObjectErrorCodes: failures of object storage, as the readers of
// datasets report them, get the code of what failed, not Internal: the
// store past its retries Unavailable, its refusal PermissionDenied, a
// changed object DataLoss, an answer past a bound or without a version
// InvalidArgument, a missing object at open InvalidArgument (as a missing
// file), the cache's bounds ResourceExhausted.
func TestObjectErrorCodes(t *testing.T) {
	obj := func(op string, err error, gaveUp time.Duration) error {
		return source.DatasetError("web", &objstore.ObjectError{URL: "s3://b/web/x.bin", Op: op, Err: err, Attempts: 3, GaveUp: gaveUp})
	}
	cases := []struct {
		name string
		err  error
		code codes.Code
	}{
		{"retries exhausted", obj("get 0-9", errors.New("connection refused"), 2*time.Minute), codes.Unavailable},
		{"wrong answers past the retries", obj("get 0-9", errors.New("wrong answer: status 200"), time.Second), codes.Unavailable},
		{"403", obj("head", fmt.Errorf("%w: StatusCode: 403", objstore.ErrDenied), 0), codes.PermissionDenied},
		{"changed", obj("get 0-9", fmt.Errorf("%w: the answer's ETag", objstore.ErrChanged), 0), codes.DataLoss},
		{"size past the bound", obj("head", fmt.Errorf("%w: size 1125899906842624", objstore.ErrBadAnswer), 0), codes.InvalidArgument},
		{"listing without end", obj("list", fmt.Errorf("%w: more than 10000 pages", objstore.ErrBadAnswer), 0), codes.InvalidArgument},
		{"unversioned", obj("open", objstore.ErrUnversioned, 0), codes.InvalidArgument},
		{"not found at open", obj("head", fmt.Errorf("%w: 404", objstore.ErrNotFound), 0), codes.InvalidArgument},
		{"over the cache", fmt.Errorf("%w: %w: half the object cache", objstore.ErrObject, objstore.ErrBudget), codes.ResourceExhausted},
		{"cache disk full", obj("get 0-9", fmt.Errorf("object cache: %w", syscall.ENOSPC), 0), codes.ResourceExhausted},
		{"another answer of the store", obj("head", errors.New("StatusCode: 301, PermanentRedirect"), 0), codes.Unavailable},
		{"object storage off", fmt.Errorf("%w: object storage is not enabled on this daemon", objstore.ErrObject), codes.Unavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, _ := status.FromError(toStatus(c.err))
			if st.Code() != c.code || st.Message() != c.err.Error() {
				t.Fatalf("%v: code %v %q, want %v", c.err, st.Code(), st.Message(), c.code)
			}
			if c.code == codes.Unavailable && !strings.Contains(st.Message(), "object storage") {
				t.Fatalf("%q: the client tells the store from the daemon by \"object storage\"", st.Message())
			}
			if got := errorKind(c.err); got != c.code.String() {
				t.Fatalf("errors_total kind %q, want %q", got, c.code.String())
			}
		})
	}
}

// TestSessionOfAnEarlierRunIsUnavailable: a request naming a session that
// an earlier run of the daemon opened gets Unavailable, as the daemon's
// absence does (a loader then reopens its session), not NotFound; an
// unknown session stays NotFound.
func TestSessionOfAnEarlierRunIsUnavailable(t *testing.T) {
	for err, want := range map[error]codes.Code{
		fmt.Errorf("%w: session %q", session.ErrDaemonRestarted, "0123"): codes.Unavailable,
		fmt.Errorf("%w: %q", session.ErrNoSession, "0123"):               codes.NotFound,
	} {
		if got := status.Code(toStatus(err)); got != want {
			t.Errorf("%v: %s, want %s", err, got, want)
		}
	}
}
