package objstore

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
)

// ErrObject marks an object that could not be listed or read, after the
// retries: the error names it. The errors below say why; an error with
// none of them is another failure of the store or of the cache.
var ErrObject = errkind.New(errkind.ObjectFailed, "object storage")

// ErrNotFound: no such object (or bucket).
var ErrNotFound = errors.New("not found")

// ErrChanged: the object was replaced after it was opened; its bytes are no
// longer the ones the dataset was opened with.
var ErrChanged = errkind.New(errkind.DataLoss, "object changed since it was opened (replaced while in use?)")

// ErrUnavailable: the store could not be reached or kept failing (throttled,
// 5xx, no answer, wrong answers) for longer than Options.RetryFor.
var ErrUnavailable = errkind.New(errkind.ObjectUnavailable, "object store unavailable")

// ErrDenied: the store refused the daemon's credentials for the object (403).
var ErrDenied = errkind.New(errkind.ObjectDenied, "access denied by the object store")

// ErrBadAnswer: the store's answer is past one of the daemon's bounds (a
// size, a count, a length) or breaks the protocol (a listing that never
// ends, keys outside the prefix listed): it is refused, never used.
var ErrBadAnswer = errkind.New(errkind.ObjectRefused, "answer refused")

// ErrUnversioned: the store gives an object neither an ETag nor a
// Last-Modified date, so a replaced object could not be told from the one
// opened; Options.AllowUnversioned reads such objects anyway.
var ErrUnversioned = errkind.New(errkind.ObjectRefused, "object has no version (neither ETag nor Last-Modified)")

// ErrBudget: an object does not fit one of the cache's bounds (half the
// cache for an object read whole, the address space of objects open at
// once); the message names the flag or bound.
var ErrBudget = errkind.New(errkind.ObjectBudget, "over the object cache's bounds")

// ObjectError is a failed operation on one object or prefix.
type ObjectError struct {
	URL string // s3://bucket/key
	Op  string // "list", "head", "get bytes A-B"
	Err error
	// Attempts is how many requests were made, retries included.
	Attempts int
	// GaveUp is set when every attempt failed in a way that could have
	// passed (throttling, 5xx, no answer, a wrong answer) until RetryFor
	// ran out: the error then also is ErrUnavailable.
	GaveUp time.Duration
}

func (e *ObjectError) Error() string {
	tries := ""
	switch {
	case e.GaveUp > 0:
		tries = fmt.Sprintf(" (%d attempts in %v)", e.Attempts, e.GaveUp.Round(time.Millisecond))
	case e.Attempts > 1:
		tries = fmt.Sprintf(" (%d attempts)", e.Attempts)
	}
	return fmt.Sprintf("%v: %s %s%s: %v", ErrObject, e.Op, e.URL, tries, e.Err)
}

func (e *ObjectError) Unwrap() []error {
	if e.GaveUp > 0 {
		return []error{ErrObject, ErrUnavailable, e.Err}
	}
	return []error{ErrObject, e.Err}
}

// kindError is err marked as one of the kinds above, with err's own text.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// badAnswer is an ErrBadAnswer with its reason.
func badAnswer(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadAnswer, fmt.Sprintf(format, args...))
}

// changed is an ErrChanged with what differs.
func changed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrChanged, fmt.Sprintf(format, args...))
}

// responseError is a ranged GET answered with other bytes than asked
// (another status, range, total or length): retried like a 5xx, and never
// data.
type responseError struct{ what string }

func (e *responseError) Error() string { return "wrong answer: " + e.what }

// plain marks the SDK's answers by kind: a missing object ErrNotFound (or,
// for a GET of an object already opened, ErrChanged: it is gone), a failed
// If-Match ErrChanged, a 403 ErrDenied. Other errors stay as they are.
func plain(err error, opened bool) error {
	var resp *awshttp.ResponseError
	if !errors.As(err, &resp) {
		return err
	}
	switch resp.HTTPStatusCode() {
	case http.StatusNotFound:
		if opened {
			return fmt.Errorf("%w: gone (404): %w", ErrChanged, err)
		}
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case http.StatusPreconditionFailed:
		return fmt.Errorf("%w: %w", ErrChanged, err)
	case http.StatusForbidden:
		return &kindError{ErrDenied, err}
	}
	return err
}

// localError is a failed write into the cache's backing file.
type localError struct{ err error }

func (e *localError) Error() string { return "object cache: " + e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// localWriter marks the errors of writing into the cache as local.
type localWriter struct{ w io.WriterAt }

func (l localWriter) WriteAt(p []byte, off int64) (int, error) {
	n, err := l.w.WriteAt(p, off)
	if err != nil {
		err = &localError{err}
	}
	return n, err
}
