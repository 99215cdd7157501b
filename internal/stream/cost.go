package stream

import (
	"time"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

// Cause is what a producer spent part of a batch's time on. A batch a
// consumer waited for was late by its causes: the session layer splits the
// consumer's wait among them (dataloaderd_rank_late_seconds_total).
type Cause int

// The causes of a batch's time.
const (
	// CauseRead: lines of pre-tokenized datasets on local files (the page
	// faults of the mapped files included).
	CauseRead Cause = iota
	// CauseTokenize: lines of text datasets, read and tokenized on the fly
	// (a text dataset in object storage counts here too).
	CauseTokenize
	// CauseObjectStorage: lines of pre-tokenized datasets in object storage
	// (s3://), waiting for their blocks included.
	CauseObjectStorage
	// CausePack: the batch around its lines: the mixture's choices,
	// metadata, the state delta.
	CausePack
	// CauseDeviceCopy: a cuda ring's copy from pinned staging to the GPU.
	CauseDeviceCopy
	// CauseOther is never a batch's: it names the part of a consumer's wait
	// longer than its batch took to make. The producer started the batch
	// late (it waited for a slot another consumer of the session still
	// held, or for a change of weights), or the consumer saw it late (its
	// wake-up on a busy CPU, the client's own work in next()), or it was on
	// its way (a message).
	CauseOther
	// NumCauses counts the causes.
	NumCauses
)

var causeNames = [NumCauses]string{"read", "tokenize", "object_storage", "pack", "device_copy", "other"}

// String is the cause's name, as the metrics and logs give it.
func (c Cause) String() string { return causeNames[c] }

// CauseNames lists every cause's name, in Cause order.
func CauseNames() []string { return causeNames[:] }

// Cost is the time one batch took to make, by cause (CauseOther: none).
type Cost [NumCauses]time.Duration

// Total is the batch's time, every cause together.
func (c Cost) Total() time.Duration {
	var t time.Duration
	for _, d := range c {
		t += d
	}
	return t
}

// Main is the cause that took the most time (CausePack for a batch that
// took none).
func (c Cost) Main() Cause {
	best := CausePack
	for i, d := range c {
		if d > c[best] {
			best = Cause(i)
		}
	}
	return best
}

// causeOf is the cause a dataset's lines count under.
func causeOf(path string, text bool) Cause {
	switch {
	case text:
		return CauseTokenize
	case files.IsObject(path):
		return CauseObjectStorage
	}
	return CauseRead
}

// batchClock times a batch's lines by cause. Where the corpus's datasets
// differ in cause it reads the clock after each line (the line's time, its
// metadata's included, goes to its dataset's cause); else once after the
// lines, all under the one cause. What follows the lines is packing.
type batchClock struct {
	on, perLine bool
	mark        time.Time
}

// start begins a batch; a batch not copied (skipped) is not timed.
func (c *batchClock) start(on, perLine bool) {
	*c = batchClock{on: on, perLine: perLine}
	if on {
		c.mark = time.Now()
	}
}

func (c *batchClock) tick(cost *Cost, cause Cause) {
	now := time.Now()
	cost[cause] += now.Sub(c.mark)
	c.mark = now
}

// line is called after each line, of a dataset of cause cause.
func (c *batchClock) line(cost *Cost, cause Cause) {
	if c.on && c.perLine {
		c.tick(cost, cause)
	}
}

// lines is called after the lines, cause being every dataset's.
func (c *batchClock) lines(cost *Cost, cause Cause) {
	if c.on && !c.perLine {
		c.tick(cost, cause)
	}
}

// rest counts the time since the lines as packing.
func (c *batchClock) rest(cost *Cost) {
	if c.on {
		c.tick(cost, CausePack)
	}
}
