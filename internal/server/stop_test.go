package server_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/server"
	"github.com/dataloaderd/dataloaderd/internal/session"
)

// endlessOpen is a session lifecycle whose Open works until its context
// ends (a skip of many batches, a long schedule to replay), then says how.
type endlessOpen struct {
	server.Sessions // the other calls are not made
	started         chan struct{}
	ended           chan error
}

func (e *endlessOpen) Open(ctx context.Context, _ session.Request) (session.Opened, error) {
	close(e.started)
	<-ctx.Done()
	e.ended <- ctx.Err()
	return session.Opened{}, session.ErrShuttingDown
}

func (e *endlessOpen) Shutdown()         {}
func (e *endlessOpen) CountError(string) {}

// TestStopEndsAnOpenInProgress: when the daemon stops (SIGTERM), the context
// of an open in progress ends, so its work stops and the stop does not
// wait for it (it waited the whole --stop-timeout, here an hour).
func TestStopEndsAnOpenInProgress(t *testing.T) {
	sessions := &endlessOpen{started: make(chan struct{}), ended: make(chan error, 1)}
	srv := server.New(server.Config{Sessions: sessions, StopTimeout: time.Hour})
	lis, cleanup, err := server.Listen(filepath.Join(t.TempDir(), "d.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	opened := make(chan error, 1)
	go func() {
		_, err := pb.NewLoaderClient(conn).OpenSession(context.Background(), &pb.OpenSessionRequest{Job: "j", DpSize: 1, Config: &pb.JobConfig{}})
		opened <- err
	}()
	select {
	case <-sessions.started:
	case err := <-opened:
		t.Fatalf("the open never reached the sessions: %v", err)
	}
	stop() // SIGTERM
	deadline := time.After(20 * time.Second)
	select {
	case err := <-sessions.ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the open's context ended with %v", err)
		}
	case <-deadline:
		t.Fatal("the open in progress went on after the daemon began to stop")
	}
	select {
	case err := <-served:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Serve returned %v", err)
		}
	case <-deadline:
		t.Fatal("Serve waited for the open in progress")
	}
	if err := <-opened; code(err).String() != "Unavailable" {
		t.Fatalf("the client's open: %v, want Unavailable", err)
	}
}
