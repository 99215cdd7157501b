package session

import (
	"hash/maphash"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
)

// A client says it reconnects (Request.ReconnectedAfter) when it reopens
// its session on a daemon restarted under it. The daemon cannot see the
// daemon before it, but it knows which (user, job, rank) it has served: a
// session whose key it served before was not on the daemon before it, so
// such a claim is not counted in dataloaderd_reconnects_total and
// dataloaderd_reconnect_wait_seconds, only logged (a client faking
// reconnects in a loop flooded both). And the lines an open logs are
// bounded per user (a burst, then a few a second, over all its jobs) and
// per (user, job) within that.

// maxSeenKeys bounds the keys a daemon remembers having served: two
// generations of half as many each; when the newer fills, the older is
// forgotten, so that a long-lived daemon's churn of jobs neither grows the
// set nor stops it counting the reconnects of jobs opened since.
const maxSeenKeys = 1 << 16

// Open log lines per (user, job): a burst (every rank and consumer of a
// node coming back at once), then lineRate a second.
const (
	lineBurst = 64
	lineRate  = 1.0
	// maxLineKeys bounds the (user, job) pairs whose lines are counted;
	// past it, pairs whose budget is full again are forgotten.
	maxLineKeys = 4096
	// A user's lines over all its jobs: a client that names a new job at
	// every open gets userBurst lines, then userRate a second.
	userBurst = 256
	userRate  = 4.0
)

// lineKey is what open log lines are bounded by: a (user, job) pair, and
// with allJobs set, the user's lines over every job.
type lineKey struct {
	uid     uint32
	job     string
	allJobs bool
}

// lineBudget is a token bucket of log lines, and the lines it suppressed
// since its last.
type lineBudget struct {
	tokens     float64
	at         time.Time
	suppressed int
}

// openLedger remembers the keys the daemon has served and bounds the log
// lines of opens.
type openLedger struct {
	mu   sync.Mutex
	seed maphash.Seed
	// seen and older are the two generations of keys served.
	seen, older map[uint64]struct{}
	budget      map[lineKey]*lineBudget
	// now is the clock of the line budgets (tests stop it).
	now func() time.Time
}

func newOpenLedger() *openLedger {
	return &openLedger{seed: maphash.MakeSeed(), seen: map[uint64]struct{}{}, older: map[uint64]struct{}{},
		budget: map[lineKey]*lineBudget{}, now: time.Now}
}

// served records that a session of key was opened, and reports whether
// none was before on this daemon (false when it cannot tell).
func (l *openLedger) served(key sessionKey) bool {
	var h maphash.Hash
	h.SetSeed(l.seed)
	h.WriteString(strconv.FormatUint(uint64(key.uid), 10))
	h.WriteByte(0)
	h.WriteString(key.job)
	h.WriteByte(0)
	h.WriteString(strconv.FormatUint(uint64(key.dpRank), 10))
	sum := h.Sum64()
	l.mu.Lock()
	defer l.mu.Unlock()
	_, known := l.seen[sum]
	if _, old := l.older[sum]; old {
		known = true
	}
	if known {
		return false
	}
	if len(l.seen) >= maxSeenKeys/2 {
		l.older, l.seen = l.seen, map[uint64]struct{}{}
	}
	l.seen[sum] = struct{}{}
	return true
}

// line reports whether an open log line of (uid, job) may be written, and
// how many were suppressed before it.
func (l *openLedger) line(uid uint32, job string) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	// The user's bucket first: past it, no bucket of a job is made.
	user := l.budgetLocked(lineKey{uid: uid, allJobs: true}, now)
	if user == nil {
		return false, 0
	}
	if user.tokens < 1 {
		user.suppressed++
		return false, 0
	}
	b := l.budgetLocked(lineKey{uid: uid, job: job}, now)
	if b == nil {
		user.suppressed++
		return false, 0
	}
	if b.tokens < 1 {
		b.suppressed++
		return false, 0
	}
	user.tokens--
	b.tokens--
	n := user.suppressed + b.suppressed
	user.suppressed, b.suppressed = 0, 0
	return true, n
}

// budgetLocked is the refilled bucket of k, made when there is room (nil
// when there is none: the line is not written).
func (l *openLedger) budgetLocked(k lineKey, now time.Time) *lineBudget {
	b := l.budget[k]
	if b == nil {
		if len(l.budget) >= maxLineKeys {
			l.forgetFullLocked(now)
		}
		if len(l.budget) >= maxLineKeys {
			return nil
		}
		b = &lineBudget{tokens: k.burst(), at: now}
		l.budget[k] = b
	}
	b.refill(now, k)
	return b
}

// burst and rate are the bucket's size and refill a second.
func (k lineKey) burst() float64 {
	if k.allJobs {
		return userBurst
	}
	return lineBurst
}

func (k lineKey) rate() float64 {
	if k.allJobs {
		return userRate
	}
	return lineRate
}

func (b *lineBudget) refill(now time.Time, k lineKey) {
	if dt := now.Sub(b.at).Seconds(); dt > 0 {
		b.tokens = min(k.burst(), b.tokens+dt*k.rate())
		b.at = now
	}
}

// forgetFullLocked drops the pairs whose budget is full again and that
// suppressed nothing: they would start afresh the same.
func (l *openLedger) forgetFullLocked(now time.Time) {
	for k, b := range l.budget {
		if b.refill(now, k); b.tokens >= k.burst() && b.suppressed == 0 {
			delete(l.budget, k)
		}
	}
}

// lineFields is line, with the field that says how many lines were
// suppressed before this one, if any.
func (l *openLedger) lineFields(uid uint32, job string) (bool, []zap.Field) {
	ok, n := l.line(uid, job)
	if n > 0 {
		return ok, []zap.Field{zap.Int("lines_suppressed", n)}
	}
	return ok, nil
}

// logOpen logs an open's outcome within the line budget of its (user,
// job), and counts a reconnect when it is one (o.reconnect).
func (m *Manager) logOpen(req Request, o Opened, err error) {
	if req.ReconnectedAfter > 0 && err == nil && o.reconnect {
		m.metrics.reconnects.Inc()
		m.metrics.reconnectWait.Observe(req.ReconnectedAfter.Seconds())
	}
	if err == nil && req.ReconnectedAfter == 0 {
		return
	}
	ok, fields := m.opens.lineFields(req.UID, req.Job)
	if !ok {
		return
	}
	fields = append(fields, zap.Uint32("uid", req.UID), zap.String("job", req.Job), zap.Uint32("dp_rank", req.DPRank))
	switch {
	case err != nil:
		m.log.Info("open session refused", append(fields, zap.Error(err))...)
	case o.reconnect:
		m.log.Info("session reopened after a daemon restart", append(fields,
			zap.Duration("without_daemon", req.ReconnectedAfter), zap.Uint64("start_step", o.StartStep))...)
	default:
		m.log.Warn("open says it reconnects after a daemon restart, but this daemon served its job and rank "+
			"before: not counted as a reconnect", append(fields, zap.Duration("without_daemon", req.ReconnectedAfter))...)
	}
}
