package objstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
)

// conns are the connections the SDK's transports dial, which the store
// closes when it closes: the idle ones, and also those in use. A request
// that ends after the store's close (a HEAD of an open still waiting on
// the store) hands its connection back to its transport, where it stayed
// open until the transport's idle timeout (90 s), holding the transport,
// its buffers and its CA bundle: about 1 MiB a store that a process
// opening stores one after the other (BenchmarkObjectsScale's runs) kept
// for each; and a server shutting down gracefully waits for open
// connections.
type conns struct {
	mu         sync.Mutex
	open       map[*trackedConn]struct{}
	closed     bool
	transports []*http.Transport
}

// errConnsClosed is the error of a dial after the store closed.
var errConnsClosed = errors.New("object store closed")

// add has t's connections tracked, dialed as t dialed them.
func (c *conns) add(t *http.Transport) {
	c.mu.Lock()
	c.transports = append(c.transports, t)
	c.mu.Unlock()
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: conn, owner: c}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed {
			conn.Close()
			return nil, fmt.Errorf("dial %s: %w", addr, errConnsClosed)
		}
		c.open[tc] = struct{}{}
		return tc, nil
	}
}

// close closes the transports' idle connections, then every connection
// still open, and refuses dials from then on.
func (c *conns) close() {
	c.mu.Lock()
	c.closed = true
	open := c.open
	c.open = map[*trackedConn]struct{}{}
	transports := c.transports
	c.mu.Unlock()
	for _, t := range transports {
		t.CloseIdleConnections()
	}
	for tc := range open {
		tc.Conn.Close()
	}
}

// trackedConn is a connection that leaves its conns when closed.
type trackedConn struct {
	net.Conn
	owner *conns
	once  sync.Once
}

func (tc *trackedConn) Close() error {
	tc.once.Do(func() {
		tc.owner.mu.Lock()
		delete(tc.owner.open, tc)
		tc.owner.mu.Unlock()
	})
	return tc.Conn.Close()
}
