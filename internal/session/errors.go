package session

import (
	"fmt"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
)

// whyClosedByConsumers is why a session its consumers closed is gone, in the
// words of both a reading consumer's error (session.goneErr) and a later
// call's (Manager.lookup): one message whichever a client meets first.
const whyClosedByConsumers = "closed by its consumers"

// Errors of the session lifecycle. The server maps each to a status code
// (internal/server/errors.go); their messages name the job, rank, session
// or value at fault.
var (
	// ErrNoSession: the session id is unknown (closed, reclaimed, or never
	// opened).
	ErrNoSession = errkind.New(errkind.NotFound, "no such session")
	// ErrSessionClosed: the session is gone because its consumers closed
	// it (an ErrNoSession). Its message is ErrNoSession's: what follows it
	// says so in the words a reading consumer gets (whyClosedByConsumers).
	ErrSessionClosed = fmt.Errorf("%w", ErrNoSession)
	// ErrSessionExists: the (job, rank) session is open and takes no more
	// consumers, or a consumer attached twice.
	ErrSessionExists = errkind.New(errkind.AlreadyExists, "session already open")
	// ErrConfigDiffers: a consumer joining a group asked for another config.
	ErrConfigDiffers = errkind.New(errkind.FailedPrecondition, "session open with another config")
	// ErrTooMany: every consumer the session declared has joined.
	ErrTooMany = errkind.New(errkind.AlreadyExists, "more consumers than the session declared")
	// ErrDaemonRestarted: the session was opened by an earlier run of the
	// daemon, which restarted since; its client opens it again.
	ErrDaemonRestarted = errkind.New(errkind.Unavailable, "the daemon restarted since the session was opened")
	// ErrShuttingDown: the daemon is stopping and opens nothing new.
	ErrShuttingDown = errkind.New(errkind.Unavailable, "daemon is shutting down")
	// ErrBadRequest: a request argument is out of range or inconsistent.
	ErrBadRequest = errkind.New(errkind.Invalid, "bad request")
	// ErrNoTransport: the transport asked for is not available here.
	ErrNoTransport = errkind.New(errkind.Unimplemented, "transport not available on this daemon")
)
