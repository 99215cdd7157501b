// Package server is the gRPC face of dataloaderd: sessions, their batch
// streams and state saves, request validation, and the mapping of domain
// errors to status codes. It is the only package that knows gRPC.
package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/cuda"
	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// Defaults of Config fields left zero.
const (
	DefaultSlots        = 8
	MaxSlots            = 256
	DefaultAttachWithin = time.Minute
)

// Config is what the server is built from; main fills it from flags.
type Config struct {
	Logger   *zap.Logger
	Registry prometheus.Registerer
	// AllowRoots confines dataset, resume and save paths; empty: no confinement.
	AllowRoots []string
	// ShmDir holds the shared-memory rings (default /dev/shm).
	ShmDir string
	// Slots is the ring size of sessions that do not ask for one.
	Slots int
	// AttachWithin is how long a joined consumer may take to open its batch
	// stream before its session is reclaimed.
	AttachWithin time.Duration
	// OpenCUDA opens the CUDA driver, on the first session asking for the
	// cuda transport; nil means cuda.OpenDriver("") (libcuda.so.1).
	OpenCUDA func() (cuda.Driver, error)
	// Resources are the tokenizers, workers and cache that text datasets
	// share; nil makes a default set (a worker per core, a 1 GiB cache).
	Resources *stream.Resources
}

// Server implements the dataloader.v1.Loader service.
type Server struct {
	pb.UnimplementedLoaderServer
	cfg     Config
	log     *zap.Logger
	roots   *files.Roots
	metrics *metrics
	health  *health.Server

	corpora *corpora
	devices func() (*cuda.Devices, error)

	mu       sync.Mutex
	sessions map[sessionKey]*session
	byID     map[string]*session
	// opening holds a channel per key whose session is being made, closed
	// when it is made (or failed).
	opening  map[sessionKey]chan struct{}
	stopping bool
}

// New builds a server; Register puts it on a grpc.Server.
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.ShmDir == "" {
		cfg.ShmDir = cuda.DefaultShmDir
	}
	if cfg.Slots == 0 {
		cfg.Slots = DefaultSlots
	}
	if cfg.AttachWithin == 0 {
		cfg.AttachWithin = DefaultAttachWithin
	}
	if cfg.OpenCUDA == nil {
		cfg.OpenCUDA = func() (cuda.Driver, error) { return cuda.OpenDriver("") }
	}
	r, err := files.NewRoots(cfg.AllowRoots)
	if err != nil {
		return nil, err
	}
	if cfg.Resources == nil {
		cfg.Resources = stream.NewResources(0, 1<<30, nil)
	}
	open := cfg.OpenCUDA
	m := newMetrics(cfg.Registry)
	m.registerResources(cfg.Registry, cfg.Resources)
	cfg.Resources.OnSkip = skipLogger(cfg.Logger, m)
	cfg.Resources.Roots = r
	corp := newCorpora(cfg.Resources)
	corp.opened = wholeFileLogger(cfg.Logger)
	return &Server{
		cfg: cfg, log: cfg.Logger, roots: r, metrics: m,
		health: health.NewServer(), corpora: corp, sessions: map[sessionKey]*session{}, byID: map[string]*session{},
		opening: map[sessionKey]chan struct{}{},
		devices: sync.OnceValues(func() (*cuda.Devices, error) {
			drv, err := open()
			if err != nil {
				return nil, err
			}
			return cuda.NewDevices(drv), nil
		}),
	}, nil
}

// Register adds the Loader and health services to g. Health reports
// NOT_SERVING until SetServing.
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterLoaderServer(g, s)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(pb.Loader_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(g, s.health)
}

// SetServing marks the daemon ready.
func (s *Server) SetServing() {
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(pb.Loader_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
}

// Sessions is the number of open sessions.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Shutdown refuses new sessions, closes every open one (their streams end
// with Unavailable) and removes their rings.
func (s *Server) Shutdown() {
	s.health.Shutdown()
	s.mu.Lock()
	s.stopping = true
	all := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		all = append(all, ss)
	}
	s.mu.Unlock()
	for _, ss := range all {
		s.drop(ss, "daemon shutting down")
	}
}

// Reap runs until ctx ends, reclaiming sessions whose consumers never
// attached a batch stream.
func (s *Server) Reap(ctx context.Context) error {
	t := time.NewTicker(s.cfg.AttachWithin / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-t.C:
			s.mu.Lock()
			var stale []*session
			for _, ss := range s.sessions {
				if ss.stale(now, s.cfg.AttachWithin) {
					stale = append(stale, ss)
				}
			}
			s.mu.Unlock()
			for _, ss := range stale {
				s.drop(ss, "a consumer never attached its batch stream")
			}
		}
	}
}

// drop removes a session and frees everything it holds; dropping twice is
// harmless.
func (s *Server) drop(ss *session, why string) {
	s.mu.Lock()
	if s.byID[ss.id] != ss {
		s.mu.Unlock()
		return
	}
	delete(s.byID, ss.id)
	delete(s.sessions, ss.key)
	s.mu.Unlock()
	ss.stop(s.metrics.clientWait)
	s.metrics.sessions.Dec()
	s.metrics.ringBytes.Sub(float64(ss.ring.Slots() * ss.ring.Stride()))
	s.metrics.readySlots.DeleteLabelValues(ss.labels()...)
	ss.log.Info("session closed", zap.String("why", why))
}

func (s *Server) lookup(id string) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.byID[id]
	if ss == nil {
		return nil, fmt.Errorf("%w: %q (closed, reclaimed, or never opened)", errNoSession, id)
	}
	return ss, nil
}

// fail counts an error and maps it to a status.
func (s *Server) fail(err error) error {
	if err == nil {
		return nil
	}
	st := toStatus(err)
	s.metrics.errors.WithLabelValues(errorKind(st)).Inc()
	return st
}

// OpenSession implements Loader.
func (s *Server) OpenSession(ctx context.Context, req *pb.OpenSessionRequest) (*pb.OpenSessionResponse, error) {
	resp, err := s.openSession(ctx, req)
	if err != nil {
		s.log.Info("open session refused", zap.String("job", req.GetJob()), zap.Uint32("dp_rank", req.GetDpRank()), zap.Error(err))
	}
	return resp, s.fail(err)
}

func (s *Server) openSession(ctx context.Context, req *pb.OpenSessionRequest) (*pb.OpenSessionResponse, error) {
	cfg, err := configFrom(req.GetConfig())
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.ValidateRank(req.GetDpRank(), req.GetDpSize()); err != nil {
		return nil, err
	}
	transport := req.GetTransport()
	if transport == pb.Transport_TRANSPORT_UNSPECIFIED {
		transport = pb.Transport_TRANSPORT_SHM
	}
	switch transport {
	case pb.Transport_TRANSPORT_SHM, pb.Transport_TRANSPORT_INLINE, pb.Transport_TRANSPORT_CUDA:
	default:
		return nil, fmt.Errorf("%w: transport %v is not supported (shm, inline or cuda)", errBadRequest, req.GetTransport())
	}
	slots := int(req.GetSlots())
	if slots == 0 {
		slots = s.cfg.Slots
	}
	if slots < 2 || slots > MaxSlots {
		return nil, fmt.Errorf("%w: slots must be in [2, %d], got %d", errBadRequest, MaxSlots, slots)
	}
	consumers := int(req.GetConsumers())
	if consumers == 0 {
		consumers = 1
	}
	// The consumers of a group must agree on all but their GPU: a cuda
	// session puts its slots on each consumer's GPU.
	ckey, err := proto.MarshalOptions{Deterministic: true}.Marshal(&pb.OpenSessionRequest{
		Config: req.GetConfig(), DpSize: req.GetDpSize(), Consumers: uint32(consumers), Transport: transport,
		ResumeFrom: req.GetResumeFrom(), ResumeStates: req.GetResumeStates(), Slots: uint32(slots),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBadRequest, err)
	}
	key := sessionKey{job: req.GetJob(), dpRank: req.GetDpRank()}

	// Join an open session of the same key. The processes of a tensor or
	// pipeline-parallel group start together: while one of them makes the
	// session, the others wait for it and then join.
	s.mu.Lock()
	for {
		if s.stopping {
			s.mu.Unlock()
			return nil, errShuttingDown
		}
		if ss := s.sessions[key]; ss != nil {
			s.mu.Unlock()
			if len(ss.attached) > 1 && ss.configKey != string(ckey) {
				return nil, fmt.Errorf("%w: job %q dp_rank %d is open with another config, dp_size, consumer count, transport or resume point",
					errConfigDiffers, key.job, key.dpRank)
			}
			c, err := ss.join()
			if err != nil {
				return nil, err
			}
			// After the join, so a refused one allocates nothing. A consumer
			// whose GPU cannot be added never attaches: the session is
			// reclaimed after --attach-within, as for one that died.
			if err := s.addDevice(ss, req.GetDevice()); err != nil {
				return nil, err
			}
			return s.describe(ss, c, req.GetDevice()), nil
		}
		made := s.opening[key]
		if made == nil {
			break
		}
		s.mu.Unlock()
		select {
		case <-made:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s.mu.Lock()
	}
	made := make(chan struct{})
	s.opening[key] = made
	s.mu.Unlock()

	ss, err := s.newSession(key, cfg, req, transport, consumers, slots, string(ckey))
	s.mu.Lock()
	delete(s.opening, key)
	close(made)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if s.stopping {
		s.mu.Unlock()
		ss.stop(s.metrics.clientWait)
		return nil, errShuttingDown
	}
	s.sessions[key] = ss
	s.byID[ss.id] = ss
	s.mu.Unlock()
	s.metrics.sessions.Inc()
	s.metrics.ringBytes.Add(float64(ss.ring.Slots() * ss.ring.Stride()))
	c, _ := ss.join()
	ss.log.Info("session opened", zap.Uint32("dp_size", req.GetDpSize()), zap.Int("consumers", consumers),
		zap.String("transport", ss.transport), zap.Uint64("start_step", ss.pipeline.StartStep()))
	return s.describe(ss, c, req.GetDevice()), nil
}

func (s *Server) newSession(key sessionKey, cfg stream.Config, req *pb.OpenSessionRequest, transport pb.Transport, consumers, slots int, ckey string) (*session, error) {
	corpus, release, err := s.corpora.acquire(req.GetConfig(), cfg)
	if err != nil {
		return nil, err
	}
	from, err := restore(corpus.Fingerprint(), s.roots, req.GetResumeFrom(), req.GetResumeStates())
	if err != nil {
		release()
		return nil, err
	}
	rank, err := stream.NewRank(corpus, req.GetDpRank(), req.GetDpSize(), from)
	if err != nil {
		release()
		return nil, err
	}
	id := newSessionID()
	slotBytes := int(cfg.BatchSize) * cfg.LineTokens() * 4
	var ring cuda.Ring
	switch transport {
	case pb.Transport_TRANSPORT_SHM:
		ring, err = cuda.NewShmRing(s.cfg.ShmDir, "dataloaderd-"+id, slots, slotBytes, consumers)
	case pb.Transport_TRANSPORT_CUDA:
		ring, err = s.deviceRing(int(req.GetDevice()), slots, slotBytes)
	default:
		ring, err = cuda.NewMemRing(slots, slotBytes)
	}
	if err != nil {
		release()
		return nil, err
	}
	// A device ring's control block lives in a file of its own beside it.
	// Without one (no writable shm directory), batches go by messages.
	var ctlFile *cuda.ControlFile
	if transport == pb.Transport_TRANSPORT_CUDA {
		ctlFile, err = cuda.NewControlFile(s.cfg.ShmDir, "dataloaderd-"+id+".ctl", ring.Slots(), consumers, ring.Stride())
		if err != nil {
			s.log.Warn("cuda session without a control block: batches go by messages", zap.String("session", id), zap.Error(err))
			ctlFile = nil
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ss := &session{
		id: id, key: key, dpSize: req.GetDpSize(), configKey: ckey, transport: transport.String(),
		corpus: corpus, releaseCorpus: release, ring: ring, datasets: corpus.DatasetNames(), cancel: cancel, done: make(chan struct{}),
		attached: make([]bool, consumers), closed: make([]bool, consumers), opened: time.Now(),
		log: s.log.With(zap.String("session", id), zap.String("job", key.job), zap.Uint32("dp_rank", key.dpRank)),
	}
	ss.pipeline = stream.NewPipeline(rank, ring, consumers)
	ss.pipeline.SetHooks(s.hooks(ss, cfg.LineTokens()))
	switch {
	case ctlFile != nil:
		ss.ctlFile, ss.ctl = ctlFile, ctlFile.Control()
	case transport == pb.Transport_TRANSPORT_SHM:
		ss.ctl = ring.(*cuda.ShmRing).Control()
	}
	if ss.ctl != nil {
		s.metrics.clientWait.track(ss.ctl)
	}
	go func() {
		defer close(ss.done)
		if err := ss.pipeline.Run(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, stream.ErrClosed) {
			ss.log.Error("producer stopped", zap.Error(err))
			s.metrics.errors.WithLabelValues("producer").Inc()
		}
	}()
	return ss, nil
}

// deviceRing makes a ring of device slots on GPU device, opening the CUDA
// driver on first use.
func (s *Server) deviceRing(device, slots, slotBytes int) (cuda.Ring, error) {
	devs, err := s.devices()
	if err != nil {
		return nil, fmt.Errorf("%w: cuda: %w; the shm and inline transports work without a GPU", errNoTransport, err)
	}
	r, err := devs.NewRing(device, slots, slotBytes)
	if err != nil {
		return nil, fmt.Errorf("cuda ring on device %d (%d slots of %d bytes): %w", device, slots, slotBytes, err)
	}
	r.OnCommit(func(took time.Duration) { s.metrics.devCopy.Observe(took.Seconds()) })
	// The ring counts its other GPUs and its freeing itself: a consumer may
	// join on another GPU until the moment the session closes.
	r.OnDeviceBytes(func(delta int) { s.metrics.devBytes.Add(float64(delta)) })
	s.metrics.devBytes.Add(float64(r.SlotsBytes()))
	return r, nil
}

// addDevice gives a cuda session's ring slots on a joining consumer's GPU,
// if it has none there; other sessions need nothing.
func (s *Server) addDevice(ss *session, device uint32) error {
	d, ok := ss.ring.(*cuda.DeviceRing)
	if !ok {
		return nil
	}
	added, err := d.AddDevice(int(device))
	if err != nil {
		return fmt.Errorf("job %q dp_rank %d: %w", ss.key.job, ss.key.dpRank, err)
	}
	if added {
		ss.log.Info("device ring extended to another GPU", zap.Uint32("device", device), zap.Ints("devices", d.Devices()))
	}
	return nil
}

// hooks follow a session's producer: they count what it serves and, on a
// ring with a control block (shm, cuda), publish every batch and the end in
// it.
func (s *Server) hooks(ss *session, lineTokens int) stream.Hooks {
	// The session's series, looked up once rather than per batch.
	lines := make([]prometheus.Counter, len(ss.datasets))
	tokens := make([]prometheus.Counter, len(ss.datasets))
	for d, name := range ss.datasets {
		lines[d] = s.metrics.lines.WithLabelValues(name)
		tokens[d] = s.metrics.tokens.WithLabelValues(name)
	}
	ready := s.metrics.readySlots.WithLabelValues(ss.labels()...)
	return stream.Hooks{
		Produced: func(b stream.Batch) {
			if ss.ctl != nil {
				ss.ctl.Publish(b.Step, b.Slot, b.Lines)
			}
			s.metrics.batches.Inc()
			for d, n := range b.DatasetLines {
				if n > 0 {
					lines[d].Add(float64(n))
					tokens[d].Add(float64(n * lineTokens))
				}
			}
			ready.Set(float64(ss.pipeline.Ready(0)))
		},
		Finished: func(step uint64, err error) {
			if ss.ctl == nil {
				return
			}
			if err != nil {
				ss.ctl.Finish(cuda.ControlFailed, step)
			} else {
				ss.ctl.Finish(cuda.ControlEnded, step)
			}
		},
		SlotWait: func(waiting bool) {
			if ss.ctl != nil {
				ss.ctl.SetProducerWaiting(waiting)
			}
		},
	}
}

// describe tells consumer what to map; device is the GPU it asked for (a
// cuda ring has slots there).
func (s *Server) describe(ss *session, consumer int, device uint32) *pb.OpenSessionResponse {
	cfg := ss.corpus.Config()
	return &pb.OpenSessionResponse{
		SessionId: ss.id, Consumer: uint32(consumer), Transport: pb.Transport(pb.Transport_value[ss.transport]),
		Ring: &pb.Ring{
			Path: ss.ring.Path(), Slots: uint32(ss.ring.Slots()),
			SlotBytes: uint64(ss.ring.SlotBytes()), SlotStride: uint64(ss.ring.Stride()), DataOffset: dataOffset(ss.ring),
			IpcHandle: ipcHandle(ss.ring, device), Device: ringDevice(ss.ring, device),
			ControlPath: ss.controlPath(), ControlBytes: ss.controlBytes(),
		},
		LineTokens: uint32(cfg.LineTokens()), BatchSize: cfg.BatchSize, StartStep: ss.pipeline.StartStep(),
	}
}

// CloseSession implements Loader.
func (s *Server) CloseSession(ctx context.Context, req *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error) {
	ss, err := s.lookup(req.GetSessionId())
	if err != nil {
		return nil, s.fail(err)
	}
	last, err := ss.closeConsumer(req.GetConsumer())
	if err != nil {
		return nil, s.fail(err)
	}
	if last {
		s.drop(ss, "closed by its consumers")
	}
	return &pb.CloseSessionResponse{}, nil
}

// GetState implements Loader.
func (s *Server) GetState(ctx context.Context, req *pb.GetStateRequest) (*pb.GetStateResponse, error) {
	ss, err := s.lookup(req.GetSessionId())
	if err != nil {
		return nil, s.fail(err)
	}
	st, err := ss.pipeline.State(req.GetStep())
	if err != nil {
		return nil, s.fail(err)
	}
	b, err := state.Encode(ss.pipeline.Fingerprint(), st)
	if err != nil {
		return nil, s.fail(err)
	}
	return &pb.GetStateResponse{State: b, DpRank: st.DPRank, DpSize: st.DPSize}, nil
}

// SaveState implements Loader.
func (s *Server) SaveState(ctx context.Context, req *pb.SaveStateRequest) (*pb.SaveStateResponse, error) {
	start := time.Now()
	ss, err := s.lookup(req.GetSessionId())
	if err != nil {
		return nil, s.fail(err)
	}
	if req.GetFolder() == "" {
		return nil, s.fail(fmt.Errorf("%w: folder is empty", errBadRequest))
	}
	folder, err := s.roots.Folder("save folder", req.GetFolder())
	if err != nil {
		return nil, s.fail(err)
	}
	st, err := ss.pipeline.State(req.GetStep())
	if err != nil {
		return nil, s.fail(err)
	}
	path, n, err := state.Save(folder, ss.pipeline.Fingerprint(), st)
	if err != nil {
		return nil, s.fail(err)
	}
	s.metrics.stateSave.Observe(time.Since(start).Seconds())
	s.metrics.stateBytes.Observe(float64(n))
	ss.log.Info("state saved", zap.String("path", path), zap.Uint64("step", st.Step), zap.Int("bytes", n))
	return &pb.SaveStateResponse{Path: path, Bytes: uint64(n)}, nil
}

// dataOffset is the file offset of a ring's slot 0.
func dataOffset(r cuda.Ring) uint64 {
	if shm, ok := r.(*cuda.ShmRing); ok {
		return uint64(shm.DataOffset())
	}
	return 0
}

// ipcHandle is the CUDA IPC handle of a device ring's slots on GPU device;
// nil for other rings.
func ipcHandle(r cuda.Ring, device uint32) []byte {
	if d, ok := r.(*cuda.DeviceRing); ok {
		return d.IPCHandle(int(device))
	}
	return nil
}

// ringDevice is the GPU of the device ring slots a consumer of GPU device
// reads; 0 for other rings.
func ringDevice(r cuda.Ring, device uint32) uint32 {
	if _, ok := r.(*cuda.DeviceRing); ok {
		return device
	}
	return 0
}
