// Package server is the gRPC face of dataloaderd: it translates the
// dataloader.v1 Loader service into calls on the session lifecycle
// (package session), and maps domain errors to status codes in one place.
// It is the only package that knows gRPC.
package server

import (
	"context"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

// Sessions is the session lifecycle the server serves (a *session.Manager).
type Sessions interface {
	// Each call names the user of the calling process (uid): sessions
	// belong to the user that opened them.
	Open(ctx context.Context, req session.Request) (session.Opened, error)
	Attach(uid uint32, id string, consumer int, control bool) (*session.Feed, error)
	Close(uid uint32, id string, consumer int) error
	State(uid uint32, id string, step uint64) (session.Snapshot, error)
	// SaveFor saves with the caller's rights on the folder (files.Caller).
	SaveFor(caller files.Caller, id string, step uint64, folder string) (session.Saved, error)
	SetWeights(ctx context.Context, uid uint32, id string, after, taken uint64, weights map[string]float64) (uint64, error)
	SkipSteps(ctx context.Context, uid uint32, id string, first, last, taken uint64) (uint64, []state.SkipRange, error)
	// CountError counts an error returned to a client, by its status code.
	CountError(kind string)
	// Shutdown closes every session and opens no more.
	Shutdown()
}

// DefaultStopTimeout is how long Serve waits for streams to end when it
// stops, when Config leaves it zero.
const DefaultStopTimeout = 10 * time.Second

// Config is what the server is built from.
type Config struct {
	Logger   *zap.Logger
	Sessions Sessions
	// StopTimeout bounds the wait for open streams when Serve stops.
	StopTimeout time.Duration
}

// Server implements the dataloader.v1.Loader service.
type Server struct {
	pb.UnimplementedLoaderServer
	log         *zap.Logger
	sessions    Sessions
	health      *health.Server
	stopTimeout time.Duration
	// stopping ends when Serve begins to stop (stop): the work of a call
	// in progress, such as an open's skip, ends with it.
	stopping context.Context
	stop     context.CancelFunc
}

// New builds a server; Serve runs it.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	stopping, stop := context.WithCancel(context.Background())
	return &Server{log: cfg.Logger, sessions: cfg.Sessions, health: health.NewServer(), stopTimeout: cfg.StopTimeout,
		stopping: stopping, stop: stop}
}

// register adds the Loader and health services to g. Health reports
// NOT_SERVING until setServing.
func (s *Server) register(g *grpc.Server) {
	pb.RegisterLoaderServer(g, s)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(pb.Loader_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(g, s.health)
}

// setServing marks the daemon ready.
func (s *Server) setServing() {
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(pb.Loader_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
}

// fail counts an error and maps it to a status.
func (s *Server) fail(err error) error {
	if err == nil {
		return nil
	}
	st := toStatus(err)
	s.sessions.CountError(errorKind(st))
	return st
}

// OpenSession implements Loader.
func (s *Server) OpenSession(ctx context.Context, req *pb.OpenSessionRequest) (*pb.OpenSessionResponse, error) {
	r, err := requestFrom(req)
	if err != nil {
		return nil, s.fail(err)
	}
	c, err := caller(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	r.UID, r.Caller, r.PID = c.UID, &c, callerPID(ctx)
	// An open's work (a skip, a schedule's replay) ends when the client
	// goes or the daemon stops, which does not wait for it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.stopping, cancel)()
	o, err := s.sessions.Open(ctx, r)
	if err != nil {
		return nil, s.fail(err)
	}
	return openedTo(o), nil
}

// CloseSession implements Loader.
func (s *Server) CloseSession(ctx context.Context, req *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error) {
	uid, err := callerUID(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	if err := s.sessions.Close(uid, req.GetSessionId(), int(req.GetConsumer())); err != nil {
		return nil, s.fail(err)
	}
	return &pb.CloseSessionResponse{}, nil
}

// GetState implements Loader.
func (s *Server) GetState(ctx context.Context, req *pb.GetStateRequest) (*pb.GetStateResponse, error) {
	uid, err := callerUID(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	st, err := s.sessions.State(uid, req.GetSessionId(), req.GetStep())
	if err != nil {
		return nil, s.fail(err)
	}
	return &pb.GetStateResponse{State: st.State, DpRank: st.DPRank, DpSize: st.DPSize, Sharded: shardedTo(st.Sharded)}, nil
}

// SetWeights implements Loader.
func (s *Server) SetWeights(ctx context.Context, req *pb.SetWeightsRequest) (*pb.SetWeightsResponse, error) {
	uid, err := callerUID(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	gen, err := s.sessions.SetWeights(ctx, uid, req.GetSessionId(), req.GetAfterStep(), req.GetTakenStep(), req.GetWeights())
	if err != nil {
		return nil, s.fail(err)
	}
	return &pb.SetWeightsResponse{Generation: gen}, nil
}

// SkipSteps implements Loader.
func (s *Server) SkipSteps(ctx context.Context, req *pb.SkipStepsRequest) (*pb.SkipStepsResponse, error) {
	uid, err := callerUID(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	gen, pending, err := s.sessions.SkipSteps(ctx, uid, req.GetSessionId(), req.GetFirst(), req.GetLast(), req.GetTakenStep())
	if err != nil {
		return nil, s.fail(err)
	}
	return &pb.SkipStepsResponse{Generation: gen, Pending: rangesTo(pending)}, nil
}

// SaveState implements Loader.
func (s *Server) SaveState(ctx context.Context, req *pb.SaveStateRequest) (*pb.SaveStateResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	saved, err := s.sessions.SaveFor(c, req.GetSessionId(), req.GetStep(), req.GetFolder())
	if err != nil {
		return nil, s.fail(err)
	}
	return &pb.SaveStateResponse{Path: saved.Path, Bytes: uint64(saved.Bytes)}, nil
}

// StateTemplate implements Loader: the state of a rank before its first
// batch, by the daemon's rule of which shards a rank owns, so that clients
// copy no such rule. It opens no session and reads no file, so it asks
// nothing of the caller.
func (s *Server) StateTemplate(_ context.Context, req *pb.StateTemplateRequest) (*pb.StateTemplateResponse, error) {
	cfg, err := configFrom(req.GetConfig())
	if err != nil {
		return nil, s.fail(err)
	}
	sharded, err := session.StateTemplate(cfg, req.GetDpRank(), req.GetDpSize())
	if err != nil {
		return nil, s.fail(err)
	}
	return &pb.StateTemplateResponse{Sharded: shardedTo(sharded)}, nil
}
