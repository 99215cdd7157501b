package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// TestHelpExitsZero: -h and --help, at the top and on every subcommand,
// print that command's usage on stdout and exit 0.
func TestHelpExitsZero(t *testing.T) {
	cases := []struct {
		args []string
		want []string // in stdout
	}{
		{[]string{"-h"}, []string{"dataloaderd serve [flags]", "dataloaderd version"}},
		{[]string{"--help"}, []string{"dataloaderd prepare [flags]"}},
		{[]string{"serve", "-h"}, []string{"dataloaderd serve: run the daemon", "-allow-root", "-tokenizer-dir"}},
		{[]string{"serve", "--help"}, []string{"-metrics-addr"}},
		{[]string{"serve", "--socket", "/tmp/x.sock", "--help"}, []string{"-socket"}},
		{[]string{"healthcheck", "-h"}, []string{"dataloaderd healthcheck", "-timeout"}},
		{[]string{"healthcheck", "--help"}, []string{"-socket"}},
		{[]string{"watch", "-h"}, []string{"dataloaderd watch --pid PID --token T", "-grace", "-sweep"}},
		{[]string{"prepare", "-h"}, []string{"dataloaderd prepare --input PATH", "-tokenizer", "-force"}},
		{[]string{"prepare", "--help"}, []string{"-append-eos"}},
		{[]string{"version", "--help"}, []string{"dataloaderd version"}},
		{[]string{"inspect", "-h"}, []string{"dataloaderd inspect [--json] [--shards] [--prefix KEY] CHECKPOINT", "-json", "-shards", "-prefix", "torch.distributed.checkpoint"}},
		{[]string{"plan", "-h"}, []string{"dataloaderd plan --ranks N", "-world", "-object-cache-mb", "-object-block-kb", "working set"}},
	}
	for _, tc := range cases {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		if code != 0 || errb.Len() > 0 {
			t.Errorf("%v: exit %d, stderr %q; want 0 and nothing", tc.args, code, errb.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v: stdout %q lacks %q", tc.args, out.String(), w)
			}
		}
	}
}

// TestUsageErrorsExitTwo: a command line that does not parse exits 2 with
// what is wrong and the usage on stderr, nothing on stdout.
func TestUsageErrorsExitTwo(t *testing.T) {
	cases := []struct {
		args []string
		want []string // in stderr
	}{
		{nil, []string{"Usage:"}},
		{[]string{"servee"}, []string{`unknown command "servee"`, "Usage:"}},
		{[]string{"serve", "--no-such-flag"}, []string{"no-such-flag", "dataloaderd serve [flags]", "-allow-root"}},
		{[]string{"serve", "extra"}, []string{`serve takes no arguments, got ["extra"]`, "-allow-root"}},
		{[]string{"healthcheck", "--timeout", "soon"}, []string{"soon", "-timeout"}},
		{[]string{"healthcheck", "extra"}, []string{"healthcheck takes no arguments", "-socket"}},
		{[]string{"prepare", "--workers", "many"}, []string{"many", "dataloaderd prepare --input PATH"}},
		{[]string{"version", "extra"}, []string{"version takes no arguments"}},
		{[]string{"plan", "x.json"}, []string{"--ranks of at least 1", "dataloaderd plan --ranks N"}},
		{[]string{"plan", "--ranks", "2"}, []string{"name one config file"}},
		{[]string{"plan", "--ranks", "4", "--world", "2", "x.json"}, []string{"--world must be at least --ranks"}},
	}
	for _, tc := range cases {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		if code != 2 || out.Len() > 0 {
			t.Errorf("%v: exit %d, stdout %q; want 2 and nothing", tc.args, code, out.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(errb.String(), w) {
				t.Errorf("%v: stderr %q lacks %q", tc.args, errb.String(), w)
			}
		}
	}
}

// TestVersionFlag: --version and -version print what `version` prints.
func TestVersionFlag(t *testing.T) {
	var want bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &want, &bytes.Buffer{}); code != 0 ||
		!strings.HasPrefix(want.String(), "dataloaderd ") {
		t.Fatalf("version: exit %d, %q", code, want.String())
	}
	for _, flag := range []string{"--version", "-version"} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{flag}, &out, &errb); code != 0 || out.String() != want.String() {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 0 and %q", flag, code, out.String(), errb.String(), want.String())
		}
	}
}

// TestVersionFrom: the stamped version wins; without it, the commit Go
// recorded (marked dirty when the tree was), else "dev".
func TestVersionFrom(t *testing.T) {
	vcs := func(kv ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{Main: debug.Module{Path: "github.com/dataloaderd/dataloaderd", Version: "(devel)"}}
		for i := 0; i < len(kv); i += 2 {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return info
	}
	const rev = "65bd55ddceaf565250814a2646aeaf2753752ec6"
	cases := []struct {
		stamped string
		info    *debug.BuildInfo
		want    string
	}{
		{"v1.2.0-3-g65bd55d-dirty", vcs("vcs.revision", rev), "v1.2.0-3-g65bd55d-dirty"},
		{"", vcs("vcs", "git", "vcs.revision", rev, "vcs.modified", "false"), "65bd55ddceaf"},
		{"", vcs("vcs.revision", rev, "vcs.modified", "true"), "65bd55ddceaf-dirty"},
		{"", vcs("vcs.revision", "abc123"), "abc123"},
		{"", vcs("-buildmode", "exe"), "dev"},
		{"", nil, "dev"},
	}
	for _, tc := range cases {
		if got := versionFrom(tc.stamped, tc.info); got != tc.want {
			t.Errorf("versionFrom(%q, %v) = %q, want %q", tc.stamped, tc.info, got, tc.want)
		}
	}
}

// byteLevelTokenizer writes a tokenizer.json of the 256 byte-level tokens
// and no merge into dir; extra goes into the model's fields, to make files
// of other bytes.
func byteLevelTokenizer(t *testing.T, dir, extra string) string {
	var vocab []string
	next := 256
	for b := range 256 {
		r := rune(b) // GPT-2's byte-to-unicode map: printable bytes stand for themselves
		if b < '!' || b > '~' && b < 0xa1 || b == 0xad {
			r, next = rune(next), next+1
		}
		vocab = append(vocab, fmt.Sprintf("%q:%d", string(r), b))
	}
	path := filepath.Join(dir, "tokenizer.json")
	data := `{"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},` +
		`"model":{"type":"BPE",` + extra + `"vocab":{` + strings.Join(vocab, ",") + `},"merges":[]}}`
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPrepareOtherTokenizer: prepare run again into its folder with another
// tokenizer is refused, naming the file, both tokenizers and --force;
// --force redoes the file.
func TestPrepareOtherTokenizer(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	os.Mkdir(in, 0o755)
	os.WriteFile(filepath.Join(in, "part.jsonl"), []byte("{\"text\": \"hello\"}\n{\"text\": \"world\"}\n"), 0o644)
	tokA := byteLevelTokenizer(t, filepath.Join(dir, "a"), "")
	tokB := byteLevelTokenizer(t, filepath.Join(dir, "b"), `"dropout":null,`)
	prep := func(tok string, extra ...string) (int, string, string) {
		var out1, err1 bytes.Buffer
		args := append([]string{"prepare", "--input", in, "--format", "jsonl", "--tokenizer", tok, "--output", out, "--quiet"}, extra...)
		return run(context.Background(), args, &out1, &err1), out1.String(), err1.String()
	}
	if code, stdout, stderr := prep(tokA); code != 0 || !strings.Contains(stdout, "files: 1 written") {
		t.Fatalf("first run: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := prep(tokA); code != 0 || !strings.Contains(stdout, "files: 0 written, 1 already done") {
		t.Fatalf("same tokenizer: exit %d\n%s%s", code, stdout, stderr)
	}
	code, _, stderr := prep(tokB)
	for _, w := range []string{filepath.Join(out, "part") + ".{bin,idx} was made with tokenizer " + tokA, "asks for tokenizer " + tokB, "--force"} {
		if code != 1 || !strings.Contains(stderr, w) {
			t.Errorf("other tokenizer: exit %d, stderr %q; want 1 and %q", code, stderr, w)
		}
	}
	if code, stdout, stderr := prep(tokB, "--force"); code != 0 || !strings.Contains(stdout, "files: 1 written") ||
		!strings.Contains(stdout, "redone (--force): 1") {
		t.Fatalf("--force: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestBeyondLoopback: the metrics listener is called exposed unless it is
// bound to a loopback address; ":0" binds every interface.
func TestBeyondLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:0": false, "[::1]:0": false, ":0": true, "0.0.0.0:0": true} {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("%s: %v (no such stack here)", addr, err)
			continue
		}
		if got := beyondLoopback(lis.Addr()); got != want {
			t.Errorf("%s (bound %s): beyondLoopback = %v, want %v", addr, lis.Addr(), got, want)
		}
		lis.Close()
	}
}

// TestObjectFlagsChecked: the object storage settings are checked at start,
// each bad one named.
func TestObjectFlagsChecked(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--object-block-kb", "6"}, "object_block_kb"},
		{[]string{"--object-cache-mb", "1"}, "object_cache_mb"},
		{[]string{"--object-cache-dir", file}, "object_cache_dir"},
		{[]string{"--object-cache-dir", filepath.Join(file, "no")}, "object_cache_dir"},
		{[]string{"--object-concurrency", "0"}, "object_concurrency"},
		{[]string{"--object-retry-for", "0s"}, "object_retry_for"},
		{[]string{"--object-path-style", "maybe"}, "object_path_style"},
	} {
		cfg, err := parseServe(tc.args, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if _, err := cfg.check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
	cfg, err := parseServe([]string{"--object-cache-dir", t.TempDir(), "--object-block-kb", "16"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.check(); err != nil {
		t.Fatalf("good object settings refused: %v", err)
	}
}
