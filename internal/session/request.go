package session

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/ring"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// Request opens a session, or joins the consumer to the session of its
// (job, data-parallel rank).
type Request struct {
	// UID is the user of the calling process: sessions and job names
	// belong to it, and no other user reaches them.
	UID uint32
	// Caller, when set, is that user's uid, gid and groups: a resume folder
	// is read with its rights (files.Folder.For). Nil: the daemon's own.
	Caller         *files.Caller
	Job            string
	DPRank, DPSize uint32
	// Consumers is the number of processes (one tensor or pipeline-parallel
	// group) that read every batch; 0 means 1.
	Consumers int
	// Transport: 0 means Shm.
	Transport Transport
	// Slots is the ring's size; 0 means the daemon's default.
	Slots int
	// Device is the GPU the consumer reads from (cuda).
	Device int
	// ResumeFrom is a checkpoint folder holding every rank file of a saved
	// world; ResumeStates are rank states given inline; ResumeSharded is the
	// state of exactly the shards this rank owns (torch.distributed.checkpoint
	// loads it so). At most one is set.
	ResumeFrom    string
	ResumeStates  [][]byte
	ResumeSharded *state.Sharded
	Config        stream.Config
	// ReconnectedAfter is set by a client reopening its session on a
	// restarted daemon: how long it was without one.
	ReconnectedAfter time.Duration
	// SkipToStep, when set, moves the new session past the batches up to
	// that step (after the resumed one) without serving them.
	SkipToStep uint64
	// ReconnectStep is, for a consumer of a group reopening its session on
	// a restarted daemon, the last step it read (see groupKey).
	ReconnectStep uint64
	// PID is the calling process (0: not known), followed until its
	// consumer attaches: one that dies before is seen (keep.go).
	PID int32
	// Fresh starts the rank over (from the resume point, if any) even when
	// its session is kept for a consumer whose process died: that session
	// goes. Without it (and without a resume point) a new process takes the
	// dead one's place and goes on where it left off (keep.go).
	Fresh bool
}

// Opened tells a consumer what it joined and what to map.
type Opened struct {
	ID        string
	Consumer  int
	Transport Transport
	Ring      ring.Layout
	// LineTokens is the tokens of a line (seq_len + 1); BatchSize the lines
	// of a full batch.
	LineTokens int
	BatchSize  uint32
	// StartStep is the step the session starts after (the resumed one).
	StartStep uint64
	// MaxSkipSteps is the most batches a reopened session of this geometry
	// may skip past its resumed step (MaxSkipSteps).
	MaxSkipSteps uint64
	// Fields is where a batch's arrays lie in a slot.
	Fields []stream.Field
	// JobFingerprint names the job in a batch's id (stream.BatchID).
	JobFingerprint string
	// Skips is the rank's skip log at StartStep: the client's next batch
	// after a step in a pending range is the one after the range.
	Skips []state.SkipRange
	// reconnect: the open is a reconnect the daemon counts (reconnects.go).
	reconnect bool
	// Continued: the consumer took the place of one whose process died
	// (keep.go); StartStep is the last step that one released.
	Continued bool
}

// Snapshot is a rank's state after a step: encoded as its state file, and
// split by shard.
type Snapshot struct {
	State          []byte
	DPRank, DPSize uint32
	Sharded        state.Sharded
}

// Saved is a state file written by Save.
type Saved struct {
	Path  string
	Bytes int
}

// Batch tells a message-mode consumer that slot Slot holds step Step's
// Lines lines; Data is their bytes on the inline transport. End says the
// rank's iteration is over after Step.
type Batch struct {
	Step  uint64
	Slot  int
	Lines int
	Data  []byte
	End   bool
	// Segments and MaxSeqlen describe the batch's cu_seqlens, if any.
	Segments, MaxSeqlen int
	// Generation is the pipeline's when the batch was handed out.
	Generation uint64
}

// reconnecting reports whether the request is a group consumer's coming
// back to a restarted daemon.
func (r *Request) reconnecting() bool { return r.ReconnectedAfter > 0 && r.Consumers > 1 }

// resolve fills the request's defaults and checks its own fields (the
// config and the rank are the plan's to check, before them).
func (r *Request) resolve(defaultSlots int) error {
	if r.Transport == 0 {
		r.Transport = Shm
	}
	if _, ok := r.Transport.spec(); !ok {
		return fmt.Errorf("%w: transport %v is not supported (%s)", ErrBadRequest, r.Transport, TransportNames())
	}
	if r.Slots == 0 {
		r.Slots = defaultSlots
	}
	if r.Slots < 2 || r.Slots > MaxSlots {
		return fmt.Errorf("%w: slots must be in [2, %d], got %d", ErrBadRequest, MaxSlots, r.Slots)
	}
	if r.Consumers == 0 {
		r.Consumers = 1
	}
	if r.Device < 0 {
		return fmt.Errorf("%w: device must be >= 0, got %d", ErrBadRequest, r.Device)
	}
	resumes := 0
	for _, given := range []bool{r.ResumeFrom != "", len(r.ResumeStates) > 0, r.ResumeSharded != nil} {
		if given {
			resumes++
		}
	}
	if resumes > 1 {
		return fmt.Errorf("%w: resume_from, resume_states and resume_sharded are ways to resume: give one", ErrBadRequest)
	}
	return nil
}

// groupKey is what the consumers of one group must agree on: all of the
// request but the job and rank (the session's key) and the consumer's GPU
// (a cuda ring gets slots on each consumer's GPU).
func (r *Request) groupKey() (string, error) {
	var sharded string
	if r.ResumeSharded != nil {
		sharded = r.ResumeSharded.Key()
	}
	if r.reconnecting() {
		// The consumers of a group coming back from a lost daemon each kept
		// their own state: the first to come back opens the session from
		// its own, and the others join it (join checks the step).
		r2 := *r
		r2.ResumeFrom, r2.ResumeStates, r2.ResumeSharded, r2.SkipToStep = "", nil, nil, 0
		r2.ReconnectedAfter, r2.ReconnectStep = 0, 0
		key, err := r2.groupKey()
		return "reconnect:" + key, err
	}
	// States by digest: a key kept for the session's life is not a copy of
	// states of up to state.MaxBytes.
	states := sha256.New()
	for _, s := range r.ResumeStates {
		fmt.Fprintf(states, "%d\x00", len(s))
		states.Write(s)
	}
	b, err := json.Marshal(struct {
		Config        stream.Config
		DPSize        uint32
		Consumers     int
		Transport     Transport
		Slots         int
		ResumeFrom    string
		ResumeStates  string
		ResumeSharded string
	}{r.Config, r.DPSize, r.Consumers, r.Transport, r.Slots, r.ResumeFrom, hex.EncodeToString(states.Sum(nil)), sharded})
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return string(b), nil
}
