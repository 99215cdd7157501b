package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseWatchRefusesWhatCannotMarkAJob(t *testing.T) {
	for _, args := range [][]string{
		{"--token", "0123456789abcdef"},                 // no --pid
		{"--pid", "1", "--token", "short"},              // too short to be unguessable
		{"--pid", "1", "--token", "0123456789abcdef=x"}, // would not be one environment entry
		{"--pid", "1", "--token", "0123456789abcdef", "--grace", "0s"},
	} {
		if _, err := parseWatch(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parseWatch(%q): no error", args)
		}
	}
	s, err := parseWatch([]string{"--pid", "7", "--token", "1b4e28ba-2fa1-11d2-883f-0016d3cca427"}, &bytes.Buffer{})
	if err != nil || s.parent != 7 || s.grace != 5*time.Second {
		t.Fatalf("parseWatch: %+v, %v", s, err)
	}
}

func TestReadStatCountsFieldsAfterTheLastParenthesis(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "42"), 0o755)
	stat := "42 (a) b (c) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 123456 1 1\n"
	os.WriteFile(filepath.Join(dir, "42", "stat"), []byte(stat), 0o644)
	st, err := readStat(dir, 42)
	if err != nil || st != (procStat{state: 'S', ppid: 7, start: 123456}) {
		t.Fatalf("readStat: %+v, %v", st, err)
	}
}

func TestHasEnvMatchesWholeEntries(t *testing.T) {
	environ := []byte("A=1\x00DATALOADERD_WRAPPER_TOKEN=abc-def\x00B=2\x00")
	if !hasEnv(environ, "DATALOADERD_WRAPPER_TOKEN=abc-def") {
		t.Error("the entry was not found")
	}
	for _, no := range []string{"DATALOADERD_WRAPPER_TOKEN=abc", "WRAPPER_TOKEN=abc-def", "DATALOADERD_WRAPPER_TOKEN=abc-defg"} {
		if hasEnv(environ, no) {
			t.Errorf("%q matched", no)
		}
	}
}

// startMarked starts sh -c script with the token entry in its environment,
// reaped as it exits (a zombie counts as gone, as once init reaps it).
func startMarked(t *testing.T, entry, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), entry)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return cmd
}

func TestJobStopsTheMarkedProcessesOnlyAndEscalates(t *testing.T) {
	mark := tokenVar + "=0123456789abcdef-test"
	startMarked(t, mark, "sleep 30")
	startMarked(t, mark, "trap '' TERM; while :; do sleep 0.05; done")
	other := startMarked(t, tokenVar+"=0123456789abcdef-other", "sleep 30")
	time.Sleep(100 * time.Millisecond) // the shells have set their traps
	start := time.Now()
	did, err := job{mark: mark, self: os.Getpid(), grace: 300 * time.Millisecond}.stop()
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("stop took %v with a grace of 300ms", took)
	}
	if len(did) != 1 || !strings.HasSuffix(did[0], "processes of its job") {
		t.Errorf("stop said %q", did)
	}
	if left := jobProcesses(mark, func(process) bool { return false }); len(left) != 0 {
		t.Errorf("marked processes left: %v", left)
	}
	if p, ok := lookup(other.Process.Pid); !ok || !p.alive() {
		t.Error("another job's process was stopped")
	}
}

func TestProcessSignalSparesAReusedPID(t *testing.T) {
	cmd := startMarked(t, "X=1", "sleep 30")
	p, ok := lookup(cmd.Process.Pid)
	if !ok {
		t.Fatal("the child is not running")
	}
	p.start++ // as if the PID now ran a later process
	if err := p.signal(9); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if q, ok := lookup(cmd.Process.Pid); !ok || q.start != p.start-1 {
		t.Error("the process on the PID was signalled")
	}
}

// deadSocket leaves a socket file that nothing listens on.
func deadSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
}

func goneChildPID(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestSweepRemovesOnlyGoneWrappersDeadSockets(t *testing.T) {
	dir := t.TempDir()
	name := func(pid int) string { return filepath.Join(dir, "dataloaderd-"+strconv.Itoa(pid)+".sock") }
	stale, live, alivePID := name(goneChildPID(t)), name(goneChildPID(t)), name(os.Getpid())
	deadSocket(t, stale)
	deadSocket(t, alivePID)
	l, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	other := filepath.Join(dir, "dataloaderd-1.sock.bak")
	os.WriteFile(other, nil, 0o600)
	removed, err := sweepSockets(dir)
	if err != nil || len(removed) != 1 || removed[0] != filepath.Base(stale) {
		t.Fatalf("sweep removed %q, %v; want only %s", removed, err, filepath.Base(stale))
	}
	for _, kept := range []string{live, alivePID, other} {
		if _, err := os.Lstat(kept); err != nil {
			t.Errorf("%s: %v", kept, err)
		}
	}
}

func TestRemoveDeadSocketLeavesLiveAndReplacedOnes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "d.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := socketFile(path)
	if removed, err := removeDeadSocket(path, id); removed || err != nil {
		t.Fatalf("a live socket: removed %v, %v", removed, err)
	}
	deadSocket(t, path+".new") // another file on the path since, made while the first still was
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if removed, _ := removeDeadSocket(path, id); removed {
		t.Fatal("a socket file created since was removed")
	}
	id, _ = socketFile(path)
	if removed, err := removeDeadSocket(path, id); !removed || err != nil {
		t.Fatalf("the dead socket: removed %v, %v", removed, err)
	}
}
