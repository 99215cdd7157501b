package server_test

import (
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// TestAllowRootFollowsFiles: --allow-root holds for the files the daemon
// opens, not only for the paths a request names: a dataset file, a
// tokenizer file or a checkpoint folder's dataloader/ that is a symlink out
// of the roots is refused with PermissionDenied; a symlink inside a root is
// followed.
func TestAllowRootFollowsFiles(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, dir := range []string{filepath.Join(root, "real"), filepath.Join(root, "ckpt"), outside} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	docs, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(3)), 200, 50, 1)
	good := testcorpus.Megatron(t, filepath.Join(root, "real"), "web", docs)
	evil := testcorpus.Megatron(t, outside, "web", docs)
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	link(filepath.Join(root, "real"), filepath.Join(root, "alias")) // stays inside
	if err := os.Mkdir(filepath.Join(root, "mixed"), 0o755); err != nil {
		t.Fatal(err)
	}
	link(good+".idx", filepath.Join(root, "mixed", "web.idx"))
	link(evil+".bin", filepath.Join(root, "mixed", "web.bin")) // leads out
	link(outside, filepath.Join(root, "ckpt", "dataloader"))
	link(filepath.Join(outside, "tok.json"), filepath.Join(root, "tok.json"))

	d := startDaemon(t, session.Config{AllowRoots: []string{root}})
	ctx := ctxT(t)
	job := func(path string) *pb.JobConfig {
		c := d.config(t)
		c.Datasets[0].Path = path
		return c
	}
	refused := func(what string, err error, want string) {
		t.Helper()
		if code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "not under any --allow-root") {
			t.Errorf("%s: err = %v, want PermissionDenied naming %s", what, err, want)
		}
	}

	_, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "bin", Config: job(filepath.Join(root, "mixed", "web")), DpSize: 1})
	refused("megatron .bin linked out", err, filepath.Join(root, "mixed", "web.bin"))

	text := job(filepath.Join(root, "real", "*.jsonl"))
	text.Datasets[0].Format, text.Datasets[0].Tokenizer = "jsonl", filepath.Join(root, "tok.json")
	testcorpus.JSONL(t, filepath.Join(root, "real", "t.jsonl"), docs, testcorpus.Plain)
	_, err = d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "tok", Config: text, DpSize: 1})
	refused("tokenizer linked out", err, "tok.json")

	open, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "ok", Config: job(filepath.Join(root, "alias", "web")), DpSize: 1})
	if err != nil {
		t.Fatalf("a dataset through a link inside the root: %v", err)
	}
	save := func(folder string) error {
		_, err := d.client.SaveState(ctx, &pb.SaveStateRequest{SessionId: open.GetSessionId(), Step: 0, Folder: folder})
		return err
	}
	refused("save folder outside", save(outside), `save folder "`+outside+`"`)
	refused("save folder whose dataloader/ leads out", save(filepath.Join(root, "ckpt")), filepath.Join(root, "ckpt", "dataloader"))
	if err := save(filepath.Join(root, "alias", "ckpt")); err != nil {
		t.Fatalf("save through a link inside the root: %v", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 2 {
		t.Errorf("the outside directory holds %d entries, want its 2 files", len(entries))
	}
	_, err = d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "r1", Config: job(good), DpSize: 1, ResumeFrom: filepath.Join(root, "ckpt")})
	refused("resume folder whose dataloader/ leads out", err, filepath.Join(root, "ckpt", "dataloader"))
	if _, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "r2", Config: job(filepath.Join(root, "alias", "web")), DpSize: 1,
		ResumeFrom: filepath.Join(root, "real", "ckpt")}); err != nil {
		t.Fatalf("resume from a folder inside the root: %v", err)
	}
}
