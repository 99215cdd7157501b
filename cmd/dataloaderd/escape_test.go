package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

// controls lists the control characters in s other than newlines.
func controls(s string) []rune {
	var out []rune
	for _, r := range s {
		if r != '\n' && (unicode.IsControl(r) || r == '\u009b') {
			out = append(out, r)
		}
	}
	return out
}

// TestInspectEscapes: dataloaderd inspect prints what a checkpoint holds
// (dataset names, formats) and the errors about it without the terminal
// escape sequences they may carry: each is shown with Go's escapes.
// Before, a dataset named "\x1b]0;owned\a..." retitled the terminal and
// "\x1b[2J" cleared it.
func TestInspectEscapes(t *testing.T) {
	dir := t.TempDir()
	roots, _ := files.NewRoots(nil)
	folder, err := roots.Folder("test", dir)
	if err != nil {
		t.Fatal(err)
	}
	evil := "\x1b]0;owned\aweb\x1b[2J\u009b31m"
	fp := state.Fingerprint{SeqLen: 8, LogicalShards: 1, Seed: 1, BOS: -1,
		Datasets: []state.DatasetPrint{{Name: evil, Format: "megatron\r\x00", Files: 1, Bytes: 10, Units: 2}}}
	st := state.Rank{DPRank: 0, DPSize: 1, Step: 3, Shards: map[state.ShardID]state.Shard{{Dataset: 0}: {Lines: 3}},
		Mixture: []state.MixChange{{Step: 0, Weights: []float64{1}}}}
	if _, _, err := state.Save(folder, fp, st); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"inspect", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if c := controls(out.String()); len(c) > 0 {
		t.Errorf("inspect printed control characters %q:\n%q", c, out.String())
	}
	for _, want := range []string{`"\x1b]0;owned\aweb\x1b[2J\u009b31m"`, `"megatron\r\x00"`,
		`weights "\x1b]0;owned\aweb\x1b[2J\u009b31m"=1`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("inspect printed no %s:\n%s", want, out.String())
		}
	}
	out.Reset()
	bad := filepath.Join(t.TempDir(), "ckpt\x1b[2J\xff")
	if code := run(context.Background(), []string{"inspect", bad}, &out, &errb); code != 1 {
		t.Fatalf("a folder that does not exist: exit %d", code)
	}
	if c := controls(errb.String()); len(c) > 0 || !strings.Contains(errb.String(), `ckpt\x1b[2J\xff`) {
		t.Errorf("the error printed control characters %q: %q", c, errb.String())
	}
}
