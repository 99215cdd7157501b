package session

import (
	"errors"
	"fmt"
)

// Errors of the session lifecycle. The server maps each to a status code
// (internal/server/errors.go); their messages name the job, rank, session
// or value at fault.
var (
	// ErrNoSession: the session id is unknown (closed, reclaimed, or never
	// opened).
	ErrNoSession = errors.New("no such session")
	// ErrSessionClosed: the session is gone because its consumers closed
	// it (an ErrNoSession).
	ErrSessionClosed = fmt.Errorf("%w: its consumers closed it", ErrNoSession)
	// ErrSessionExists: the (job, rank) session is open and takes no more
	// consumers, or a consumer attached twice.
	ErrSessionExists = errors.New("session already open")
	// ErrConfigDiffers: a consumer joining a group asked for another config.
	ErrConfigDiffers = errors.New("session open with another config")
	// ErrTooMany: every consumer the session declared has joined.
	ErrTooMany = errors.New("more consumers than the session declared")
	// ErrDaemonRestarted: the session was opened by an earlier run of the
	// daemon, which restarted since; its client opens it again.
	ErrDaemonRestarted = errors.New("the daemon restarted since the session was opened")
	// ErrShuttingDown: the daemon is stopping and opens nothing new.
	ErrShuttingDown = errors.New("daemon is shutting down")
	// ErrBadRequest: a request argument is out of range or inconsistent.
	ErrBadRequest = errors.New("bad request")
	// ErrNoTransport: the transport asked for is not available here.
	ErrNoTransport = errors.New("transport not available on this daemon")
)
