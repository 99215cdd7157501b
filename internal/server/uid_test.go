package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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

// otherUID is the user the intruder runs as ("nobody" on Debian).
const otherUID = 65534

// helperEnv, when set, makes the test binary the intruder: it runs
// intrude with the JSON in the variable and exits.
const helperEnv = "DATALOADERD_TEST_INTRUDER"

func TestMain(m *testing.M) {
	if arg := os.Getenv(helperEnv); arg != "" {
		os.Exit(intrude(arg))
	}
	if arg := os.Getenv(callerEnv); arg != "" {
		os.Exit(actAsCaller(arg)) // access_test.go
	}
	os.Exit(m.Run())
}

// intruderArgs is what the intruder is told: the socket, the victim's
// session id, and the victim's job config (protojson).
type intruderArgs struct {
	Socket, Session, Folder string
	Config                  json.RawMessage
}

// intrude does, as another user, what an intruder who read a session id
// would, and prints each call's status code as JSON.
func intrude(arg string) int {
	var a intruderArgs
	if err := json.Unmarshal([]byte(arg), &a); err != nil {
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
	codes := map[string]string{}
	code := func(err error) string { return status.Code(err).String() }
	_, err = c.GetState(ctx, &pb.GetStateRequest{SessionId: a.Session})
	codes["GetState"] = code(err)
	_, err = c.SaveState(ctx, &pb.SaveStateRequest{SessionId: a.Session, Step: 0, Folder: a.Folder})
	codes["SaveState"] = code(err)
	_, err = c.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: a.Session})
	codes["CloseSession"] = code(err)
	if stream, err := c.Batches(ctx); err != nil {
		codes["Batches"] = code(err)
	} else {
		err = stream.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Attach{Attach: &pb.Attach{SessionId: a.Session}}})
		if err == nil {
			_, err = stream.Recv()
		}
		codes["Batches"] = code(err)
	}
	var cfg pb.JobConfig
	if err := protojson.Unmarshal(a.Config, &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	o, err := c.OpenSession(ctx, &pb.OpenSessionRequest{Job: "j", Config: &cfg, DpRank: 0, DpSize: 1})
	codes["OpenSession"] = code(err)
	codes["own_session"] = o.GetSessionId()
	json.NewEncoder(os.Stdout).Encode(codes)
	return 0
}

// TestSessionsBelongToTheirUser: another user who knows a session's id
// (it was in the ring file's name in /dev/shm) cannot get, save, close or
// attach to it; opening the same job name and rank gives that user a
// session of its own, and the victim's goes on. The ring files' names do
// not hold session ids. Before, every call succeeded, and the intruder's
// open of job "j" rank 0 joined or blocked the victim's.
func TestSessionsBelongToTheirUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs a process as another user, which needs root (CI runs as root)")
	}
	d := startDaemon(t, session.Config{})
	ctx := ctxT(t)
	cfg := d.config(t)
	victim, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "j", Config: cfg, DpRank: 0, DpSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	names, err := os.ReadDir(d.shm)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.Contains(n.Name(), victim.GetSessionId()) {
			t.Errorf("ring file %s names the session id", n.Name())
		}
	}
	// Let the other user reach the socket, and run a copy of this binary.
	sock := strings.TrimPrefix(d.conn.Target(), "unix://")
	for dir := filepath.Dir(sock); dir != "/" && dir != os.TempDir(); dir = filepath.Dir(dir) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(t.TempDir(), "intruder")
	copyFile(t, os.Args[0], self)
	if err := os.Chmod(filepath.Dir(self), 0o755); err != nil {
		t.Fatal(err)
	}
	folder := filepath.Join(t.TempDir(), "stolen")
	cj, err := protojson.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	arg, _ := json.Marshal(intruderArgs{Socket: sock, Session: victim.GetSessionId(), Folder: folder, Config: cj})
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"="+string(arg))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUID, Gid: otherUID}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("intruder: %v: %s", err, out)
	}
	var got map[string]string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("intruder printed %q: %v", out, err)
	}
	for _, op := range []string{"GetState", "SaveState", "CloseSession", "Batches"} {
		if got[op] != "NotFound" {
			t.Errorf("another user's %s on the victim's session: %s, want NotFound", op, got[op])
		}
	}
	if got["OpenSession"] != "OK" || got["own_session"] == "" || got["own_session"] == victim.GetSessionId() {
		t.Errorf("another user's open of job j rank 0: %s, session %q (victim's %q): want a session of its own",
			got["OpenSession"], got["own_session"], victim.GetSessionId())
	}
	if _, err := os.Stat(folder); !os.IsNotExist(err) {
		t.Errorf("the intruder's save wrote %s", folder)
	}
	if _, err := d.client.GetState(ctx, &pb.GetStateRequest{SessionId: victim.GetSessionId()}); err != nil {
		t.Fatalf("the victim's session after the intrusion: %v", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
