package cuda

import (
	"errors"
	"strings"
	"testing"
)

// SpinBudget is spinBudget, for the external tests.
var SpinBudget = spinBudget

// CheckError fails t unless err is call failing with res, and its message
// names both.
func CheckError(t *testing.T, err error, call string, res Result) {
	t.Helper()
	var ce *Error
	if !errors.As(err, &ce) || ce.Call != call || !errors.Is(err, res) {
		t.Errorf("%s failing with %s: got %v", call, res.Name(), err)
		return
	}
	if msg := err.Error(); !strings.Contains(msg, call) || !strings.Contains(msg, res.Name()) {
		t.Errorf("error %q does not name %s and %s", msg, call, res.Name())
	}
}
