package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestObjectAllowUnversioned: --object-allow-unversioned is off by default
// and set by the flag or the config file's object_allow_unversioned, the
// flag over the file.
func TestObjectAllowUnversioned(t *testing.T) {
	file := filepath.Join(t.TempDir(), "daemon.json")
	if err := os.WriteFile(file, []byte(`{"object_allow_unversioned": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--object-allow-unversioned"}, true},
		{[]string{"--config", file}, true},
		{[]string{"--config", file, "--object-allow-unversioned=false"}, false},
	} {
		cfg, err := parseServe(c.args, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if cfg.ObjectAllowUnversioned != c.want {
			t.Errorf("%v: object_allow_unversioned %v, want %v", c.args, cfg.ObjectAllowUnversioned, c.want)
		}
		if _, err := cfg.check(); err != nil {
			t.Errorf("%v: %v", c.args, err)
		}
	}
}
