package session

import (
	"context"
	"fmt"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// resumeState is the state an open's rank resumes from (nil: none): read
// from its resume point (restore), and refused if what the session could
// come to save would not fit (checkStateSize, budget.go).
func resumeState(corpus *stream.Corpus, roots *files.Roots, req Request) (*state.Restored, error) {
	from, err := restore(corpus.Fingerprint(), roots, req)
	if err == nil {
		err = checkStateSize(corpus.Fingerprint(), req, from)
	}
	if err != nil {
		return nil, err
	}
	return from, nil
}

// rankFrom builds an open's rank from the state it resumes from, the
// config's skip_steps added to its skip log (warnings: the ranges before
// the resumed step that the log lacks); a state the corpus refuses is
// named by where it came from.
func rankFrom(ctx context.Context, corpus *stream.Corpus, req Request, from *state.Restored) (*stream.Rank, []string, error) {
	rank, err := stream.NewRankContext(ctx, corpus, req.DPRank, req.DPSize, from)
	if err != nil && from != nil {
		err = fmt.Errorf("%s: %w", resumeSource(req), err)
	}
	if err != nil {
		return nil, nil, err
	}
	warnings, err := rank.AddConfigSkips()
	if err != nil {
		return nil, nil, err
	}
	return rank, warnings, nil
}

// Resume is where ResumeRank's rank starts: the rank files of a checkpoint
// folder (Folder, as resume_from), or a loader's state read from a
// torch.distributed.checkpoint (Sharded, as resume_sharded); neither: the
// run's start.
type Resume struct {
	Folder  string
	Sharded *state.Sharded
}

// ResumeRank builds rank dpRank of dpSize of corpus as a session opened
// with that resume point builds it, with the process's own rights: the
// state read from the rank files it needs (or taken from the sharded
// state), the same checks, the same rank. No session, ring or producer:
// dataloaderd explain moves it to a step and lays out that batch.
func ResumeRank(ctx context.Context, corpus *stream.Corpus, roots *files.Roots, from Resume, dpRank, dpSize uint32) (*stream.Rank, error) {
	req := Request{DPRank: dpRank, DPSize: dpSize, ResumeFrom: from.Folder, ResumeSharded: from.Sharded, Config: corpus.Config()}
	st, err := resumeState(corpus, roots, req)
	if err != nil {
		return nil, err
	}
	rank, _, err := rankFrom(ctx, corpus, req, st)
	return rank, err
}
