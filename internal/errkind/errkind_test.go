package errkind

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

// TestNew: a sentinel keeps its text, is its kind and no other, and two
// sentinels of one kind are told apart.
func TestNew(t *testing.T) {
	a, b := New(NotFound, "no such session"), New(NotFound, "no such session")
	if a.Error() != "no such session" {
		t.Fatalf("text %q", a.Error())
	}
	wrapped := fmt.Errorf("session %q: %w", "s1", a)
	if !errors.Is(wrapped, a) || errors.Is(wrapped, b) {
		t.Fatal("sentinels of one kind are not told apart")
	}
	if !errors.Is(wrapped, NotFound) || errors.Is(wrapped, Invalid) {
		t.Fatal("a sentinel is not its kind alone")
	}
	if Of(wrapped) != NotFound {
		t.Fatalf("Of = %v", Of(wrapped))
	}
}

// TestOf: of several kinds the first in order decides, whichever wraps
// which; the standard errors have their kinds; nil and plain errors none.
func TestOf(t *testing.T) {
	invalid, failed := New(Invalid, "invalid config"), New(FailedPrecondition, "state too large")
	cases := []struct {
		err  error
		want Kind
	}{
		{nil, Unknown},
		{errors.New("x"), Unknown},
		{fmt.Errorf("%w: %w", invalid, failed), Invalid},
		{fmt.Errorf("%w: %w", failed, invalid), Invalid},
		{errors.Join(New(ObjectFailed, "object storage"), New(ObjectBudget, "over")), ObjectBudget},
		{fmt.Errorf("save: %w", syscall.ENOSPC), ResourceExhausted},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.EACCES}, PermissionDenied},
		{syscall.EROFS, PermissionDenied},
		{fmt.Errorf("%w: %w", context.Canceled, invalid), Canceled},
		{context.DeadlineExceeded, DeadlineExceeded},
	}
	for _, c := range cases {
		if got := Of(c.err); got != c.want {
			t.Errorf("Of(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestNames: every kind has a name of its own.
func TestNames(t *testing.T) {
	seen := map[string]Kind{}
	for _, k := range append(Kinds(), Unknown) {
		n := k.String()
		if n == "" || seen[n] != 0 {
			t.Fatalf("kind %d named %q", k, n)
		}
		seen[n] = k
	}
	if Kind(200).String() != "kind 200" {
		t.Fatalf("out of range: %q", Kind(200).String())
	}
}
