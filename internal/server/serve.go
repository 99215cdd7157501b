package server

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Serve serves the Loader and health services on lis until ctx ends (or
// serving fails). Health reports SERVING once it is listening. On the way
// out it reports NOT_SERVING, closes every session (their streams end with
// Unavailable) and waits up to the StopTimeout for the streams to end, then
// stops hard. It returns ctx's error after a stop asked for.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	g := grpc.NewServer(s.serverOptions()...)
	s.register(g)
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	s.setServing()
	select {
	case err := <-served:
		s.health.Shutdown()
		s.sessions.Shutdown()
		s.stop()
		return err
	case <-ctx.Done():
	}
	s.log.Info("stopping")
	s.health.Shutdown()
	s.sessions.Shutdown()
	s.stop() // after Shutdown: an open it ends answers ErrShuttingDown
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(s.stopTimeout):
		g.Stop()
	}
	<-served
	return ctx.Err()
}

// Healthcheck asks the health service of the daemon on socket; nil only
// when it answers SERVING.
func Healthcheck(ctx context.Context, socket string) error {
	path, err := SocketPath(socket)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("healthcheck %s: %w", path, err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("healthcheck %s: %v", path, resp.GetStatus())
	}
	return nil
}
