package s3test

import (
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowDownBody is S3's answer to a client it throttles.
const slowDownBody = `<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`

// refusedBodyLimit bounds how much of a refused request's body the proxy
// reads (and drops) before it answers, so that the client, still sending,
// reads the answer rather than a reset connection.
const refusedBodyLimit = 64 << 20

// FaultProxy is an HTTP reverse proxy in front of an S3 server that answers
// a pseudo-random fraction of the requests itself with 503 SlowDown, as S3
// does when it throttles, and forwards the others unchanged, or changed by
// the lies set with SetLies (lies.go). Which requests
// it refuses follows from the seed and the order they arrive in: the n-th
// request is refused when the n-th number drawn is below the fraction in
// force then.
//
// The Host header goes to the server as the client sent it, since SigV4
// signs it: a client signs for the proxy's address, and the server checks
// the signature against the Host it receives.
type FaultProxy struct {
	// URL is the proxy's address, http://127.0.0.1:PORT: a client's endpoint.
	URL string

	srv       *httptest.Server
	rp        *httputil.ReverseProxy
	target    *url.URL
	transport *http.Transport
	fraction  atomic.Uint64 // math.Float64bits of the fraction refused
	delay     atomic.Int64  // time.Duration each request waits before it is answered

	lies   atomic.Pointer[Lies]
	signer *signer // to sign requests a lie changes; nil but for NewLyingProxy
	lied   atomic.Int64

	mu  sync.Mutex // guards rng
	rng *rand.Rand

	requests, refused, forwarded atomic.Int64

	// answered counts the requests past their delay, which may have been
	// answered; logMu guards log, the requests received since KeepLog,
	// nil when not kept.
	answered atomic.Int64
	logMu    sync.Mutex
	log      []Request
}

// Request is one request the proxy received, as KeepLog keeps it.
type Request struct {
	Method, Path, Range string
	// Answered is how many requests had waited their delay (SetDelay),
	// and so may have been answered, when this one arrived: requests sent
	// together, none waiting for an answer to another, have the same
	// count where the delay is longer than it takes to send them; a
	// request sent after an answer has a higher count than the request
	// answered.
	Answered int64
}

// NewFaultProxy starts a proxy to target (a server's Endpoint) that refuses
// fraction (0 to 1) of the requests, chosen by a generator seeded with seed.
// It closes when the test ends.
func NewFaultProxy(t testing.TB, target string, fraction float64, seed int64) *FaultProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil || u.Scheme == "" || u.Host == "" {
		t.Fatalf("s3test: fault proxy target %q is not a URL (%v)", target, err)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// Hand the server's bytes and Content-Length back as they are.
	transport.DisableCompression = true
	p := &FaultProxy{rng: rand.New(rand.NewPCG(uint64(seed), 0x5333746573740a)), target: u, transport: transport}
	p.SetFraction(fraction)
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			// Only where the request goes changes: the path and query stay
			// as the client escaped and signed them, and so does Host.
			r.Out.URL.Scheme = u.Scheme
			r.Out.URL.Host = u.Host
			r.Out.Host = r.In.Host
		},
		Transport:  transport,
		BufferPool: proxyBuffers{},
		// A server that is down (stopped by the test) is a 502, as a load
		// balancer would answer, without the default handler's log line.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	p.URL = p.srv.URL
	t.Cleanup(func() {
		p.srv.Close()
		transport.CloseIdleConnections()
	})
	return p
}

// proxyBuffers are the buffers the proxy copies answers through, reused
// (the reverse proxy makes one of 32 KiB per request without them).
type proxyBuffers struct{}

var proxyBufferPool = sync.Pool{New: func() any { return new([32 << 10]byte) }}

func (proxyBuffers) Get() []byte { return proxyBufferPool.Get().(*[32 << 10]byte)[:] }

func (proxyBuffers) Put(b []byte) {
	if len(b) == 32<<10 {
		proxyBufferPool.Put((*[32 << 10]byte)(b))
	}
}

func (p *FaultProxy) serve(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	p.logMu.Lock()
	if p.log != nil {
		p.log = append(p.log, Request{Method: r.Method, Path: r.URL.Path, Range: r.Header.Get("Range"), Answered: p.answered.Load()})
	}
	p.logMu.Unlock()
	if d := time.Duration(p.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	p.answered.Add(1) // from here on, it may be answered
	if p.refuse() {
		p.refused.Add(1)
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, refusedBodyLimit))
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, slowDownBody)
		return
	}
	p.forwarded.Add(1)
	if l := p.lies.Load(); l != nil {
		p.serveLies(w, r, l)
		return
	}
	p.rp.ServeHTTP(w, r)
}

// refuse draws the next number and says whether this request is refused. It
// draws for every request, whatever the fraction, so that the pattern of a
// seed does not depend on when SetFraction was called.
func (p *FaultProxy) refuse() bool {
	p.mu.Lock()
	x := p.rng.Float64()
	p.mu.Unlock()
	return x < p.Fraction()
}

// SetFraction changes the fraction of requests refused from now on; it is
// clamped to [0, 1].
func (p *FaultProxy) SetFraction(f float64) {
	f = max(0, min(1, f))
	if math.IsNaN(f) {
		f = 0
	}
	p.fraction.Store(math.Float64bits(f))
}

// SetDelay makes every request wait d before it is answered: the first-byte
// latency of a store in another building or region.
func (p *FaultProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// KeepLog starts keeping a log of the requests received (Log), empty.
func (p *FaultProxy) KeepLog() {
	p.logMu.Lock()
	p.log = []Request{}
	p.logMu.Unlock()
}

// Log is the requests received since KeepLog, in the order they arrived.
func (p *FaultProxy) Log() []Request {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	return append([]Request(nil), p.log...)
}

// Fraction is the fraction of requests refused.
func (p *FaultProxy) Fraction() float64 { return math.Float64frombits(p.fraction.Load()) }

// Requests counts the requests the proxy received.
func (p *FaultProxy) Requests() int64 { return p.requests.Load() }

// Refused counts the requests it answered with 503 SlowDown.
func (p *FaultProxy) Refused() int64 { return p.refused.Load() }

// Forwarded counts the requests it passed to the server.
func (p *FaultProxy) Forwarded() int64 { return p.forwarded.Load() }
