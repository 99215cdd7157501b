package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/session"
)

// callerEnv, when set, makes the test binary a client of another user
// (actAsCaller) with the JSON in the variable.
const callerEnv = "DATALOADERD_TEST_CALLER"

// callerArgs is what that client is told: the socket, its job config
// (protojson), the folders to save into and to resume from.
type callerArgs struct {
	Socket     string
	Config     json.RawMessage
	SaveInto   []string
	ResumeFrom []string
}

// callerResult is each call's status code and message, by folder.
type callerResult struct {
	Code, Message string
}

// actAsCaller opens a session of its own, saves it into each folder and
// opens sessions resumed from each folder, and prints the outcomes.
func actAsCaller(arg string) int {
	var a callerArgs
	if err := json.Unmarshal([]byte(arg), &a); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var cfg pb.JobConfig
	if err := protojson.Unmarshal(a.Config, &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	conn, err := grpc.NewClient("unix://"+a.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer conn.Close()
	c := pb.NewLoaderClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	own, err := c.OpenSession(ctx, &pb.OpenSessionRequest{Job: "own", Config: &cfg, DpSize: 1, Transport: pb.Transport_TRANSPORT_INLINE})
	if err != nil {
		fmt.Fprintln(os.Stderr, "own session:", err)
		return 2
	}
	got := map[string]callerResult{}
	result := func(err error) callerResult {
		return callerResult{Code: status.Code(err).String(), Message: status.Convert(err).Message()}
	}
	for _, f := range a.SaveInto {
		_, err := c.SaveState(ctx, &pb.SaveStateRequest{SessionId: own.GetSessionId(), Folder: f})
		got["save "+f] = result(err)
	}
	for i, f := range a.ResumeFrom {
		o, err := c.OpenSession(ctx, &pb.OpenSessionRequest{Job: fmt.Sprint("resumed", i), Config: &cfg, DpSize: 1,
			Transport: pb.Transport_TRANSPORT_INLINE, ResumeFrom: f})
		got["resume "+f] = result(err)
		if err == nil {
			c.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: o.GetSessionId()})
		}
	}
	c.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: own.GetSessionId()})
	json.NewEncoder(os.Stdout).Encode(got)
	return 0
}

// TestFilesWithTheCallersRights: another user who can reach the socket,
// with only a session of its own, cannot save into the trainer's 0700
// checkpoint folder (before, it replaced the trainer's rank file with one
// of its own fingerprint) nor resume from a rank file it cannot read
// (before, the daemon read it with its own rights): both are
// PermissionDenied naming the path and the user. It saves into a folder
// it may write, by its own rights or a supplementary group's, and what
// the daemon makes there is its own.
func TestFilesWithTheCallersRights(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs a process as another user, which needs root (CI runs as root)")
	}
	const team = 4343 // a group the other user is in, as a supplementary group
	d := startDaemon(t, session.Config{})
	ctx := ctxT(t)
	cfg := d.config(t)
	base := t.TempDir()
	for dir := base; dir != "/" && dir != os.TempDir(); dir = filepath.Dir(dir) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	private, readable := filepath.Join(base, "private"), filepath.Join(base, "readable")
	trainer, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "trainer", Config: cfg, DpSize: 1, Transport: pb.Transport_TRANSPORT_INLINE})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{private, readable} {
		if _, err := d.client.SaveState(ctx, &pb.SaveStateRequest{SessionId: trainer.GetSessionId(), Folder: f}); err != nil {
			t.Fatal(err)
		}
	}
	rankFile := func(folder string) string { return filepath.Join(folder, "dataloader", "rank-0-of-1.json") }
	os.Chmod(private, 0o700)
	os.Chmod(readable, 0o755)
	os.Chmod(filepath.Join(readable, "dataloader"), 0o755) // the file itself stays 0600
	before, err := os.ReadFile(rankFile(private))
	if err != nil {
		t.Fatal(err)
	}
	shared, teamDir := filepath.Join(base, "shared"), filepath.Join(base, "team")
	os.Mkdir(shared, 0o777)
	os.Chmod(shared, 0o777)
	os.Mkdir(teamDir, 0o770)
	os.Chmod(teamDir, 0o770)
	os.Chown(teamDir, 0, team)

	sock := strings.TrimPrefix(d.conn.Target(), "unix://")
	for dir := filepath.Dir(sock); dir != "/" && dir != os.TempDir(); dir = filepath.Dir(dir) {
		os.Chmod(dir, 0o755)
	}
	os.Chmod(sock, 0o666)
	self := filepath.Join(base, "caller")
	copyFile(t, os.Args[0], self)
	cj, err := protojson.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	arg, _ := json.Marshal(callerArgs{Socket: sock, Config: cj,
		SaveInto:   []string{private, filepath.Join(shared, "ckpt"), filepath.Join(shared, "ckpt"), filepath.Join(teamDir, "ckpt")},
		ResumeFrom: []string{private, readable, filepath.Join(shared, "ckpt")}})
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), callerEnv+"="+string(arg))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUID, Gid: otherUID, Groups: []uint32{team}}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the other user's client: %v: %s", err, stderr.String())
	}
	var got map[string]callerResult
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("the other user's client printed %q: %v", out, err)
	}
	who := fmt.Sprintf("uid %d", otherUID)
	refused := func(call, path string) {
		t.Helper()
		r := got[call]
		if r.Code != "PermissionDenied" || !strings.Contains(r.Message, path) || !strings.Contains(r.Message, who) {
			t.Errorf("%s: %s %q, want PermissionDenied naming %s and %s", call, r.Code, r.Message, path, who)
		}
	}
	refused("save "+private, private)
	refused("resume "+private, private)
	refused("resume "+readable, rankFile(readable))
	for _, call := range []string{"save " + filepath.Join(shared, "ckpt"), "save " + filepath.Join(teamDir, "ckpt"),
		"resume " + filepath.Join(shared, "ckpt")} {
		if got[call].Code != "OK" {
			t.Errorf("%s: %s %q, want OK", call, got[call].Code, got[call].Message)
		}
	}
	if after, err := os.ReadFile(rankFile(private)); err != nil || !bytes.Equal(after, before) {
		t.Errorf("the trainer's rank file after the other user's save: %v, changed %v", err, !bytes.Equal(after, before))
	}
	for _, p := range []string{filepath.Join(shared, "ckpt"), filepath.Join(shared, "ckpt", "dataloader"),
		rankFile(filepath.Join(shared, "ckpt")), rankFile(filepath.Join(teamDir, "ckpt"))} {
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := info.Sys().(*syscall.Stat_t); st.Uid != otherUID || st.Gid != otherUID {
			t.Errorf("%s belongs to %d:%d, want the other user's %d:%d", p, st.Uid, st.Gid, otherUID, otherUID)
		}
	}
}
