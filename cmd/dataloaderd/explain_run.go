package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dataloaderd/dataloaderd/internal/dcp"
	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// explained is what explain reports, also its --json form.
type explained struct {
	Config         string         `json:"config"`
	JobFingerprint string         `json:"job_fingerprint"`
	From           string         `json:"from,omitempty"`
	DPSize         uint32         `json:"dp_size"`
	FirstStep      uint64         `json:"first_step"`
	LastStep       uint64         `json:"last_step"`
	Ranks          []rankReached  `json:"ranks"`
	Pieces         []stream.Piece `json:"pieces"`
}

// rankReached says how a rank reached the first step asked.
type rankReached struct {
	DPRank uint32 `json:"dp_rank"`
	// FromStep is the step of the state it started from (0: the start).
	FromStep uint64 `json:"from_step"`
	// Counted: it was moved by counting lines, not batch by batch.
	Counted     bool    `json:"counted"`
	SkipSeconds float64 `json:"skip_seconds"`
	// LastStep is the rank's last step when the run ends before the last
	// step asked (epochs), else 0.
	LastStep uint64 `json:"last_step,omitempty"`
	// Skipped are the steps asked that the rank skipped (skip_steps: the
	// checkpoint's log and the config's key): made and dropped, never
	// served, so no piece names them.
	Skipped []state.SkipRange `json:"skipped,omitempty"`
	// BlocklistChanged: the config's blocklist is not the one the
	// checkpoint's state had in effect (added, changed or dropped), so the
	// steps are explained as a resume under this config serves them, not
	// necessarily as the run that saved the checkpoint went on.
	BlocklistChanged bool `json:"blocklist_changed,omitempty"`
}

// explain opens the config's corpus and explains the steps asked on each
// rank asked.
func explain(ctx context.Context, req explainRequest) (explained, error) {
	cfg, err := readJobConfig(req.config)
	if err == nil {
		err = readSchedule(req.config, &cfg)
	}
	if err == nil {
		err = cfg.ValidateRank(req.ranks-1, req.ranks)
	}
	if err != nil {
		return explained{}, err
	}
	res := stream.NewResources(0, 256<<20, req.tokenizers)
	defer res.Close()
	if res.Roots, err = files.NewRoots(nil); err != nil {
		return explained{}, err
	}
	if slices.ContainsFunc(cfg.Datasets, func(d stream.Dataset) bool { return objstore.IsURL(d.Path) }) {
		store, err := objstore.New(objstore.Options{})
		if err != nil {
			return explained{}, err
		}
		defer store.Close()
		res.Roots = res.Roots.WithObjects(store)
	}
	corpus, err := stream.OpenCorpusContext(ctx, cfg, res)
	if err != nil {
		return explained{}, err
	}
	defer corpus.Close()
	rep := explained{Config: req.config, JobFingerprint: corpus.JobFingerprint(), From: req.from, DPSize: req.ranks,
		FirstStep: req.first, LastStep: req.last, Pieces: []stream.Piece{}}
	if req.batchFP != "" && req.batchFP != rep.JobFingerprint {
		return explained{}, fmt.Errorf("the batch id's job fingerprint is %s, config %s's is %s: the batch is of another job "+
			"(its datasets, their files, seq_len, batch_size, logical_shards, seed, ... differ)", req.batchFP, req.config, rep.JobFingerprint)
	}
	from, err := resumePoint(req.from, req.prefix)
	if err != nil {
		return explained{}, err
	}
	var ranks []uint32
	for r := uint32(0); r < req.ranks; r++ {
		if req.rank < 0 || uint32(req.rank) == r {
			ranks = append(ranks, r)
		}
	}
	rep.Ranks = make([]rankReached, len(ranks))
	pieces := make([][]stream.Piece, len(ranks))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, r := range ranks {
		g.Go(func() (err error) {
			rep.Ranks[i], pieces[i], err = explainRank(gctx, corpus, res.Roots, from, req, r)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return explained{}, err
	}
	for _, ps := range pieces {
		rep.Pieces = append(rep.Pieces, ps...)
	}
	slices.SortStableFunc(rep.Pieces, func(a, b stream.Piece) int {
		if a.Step != b.Step {
			return cmp.Compare(a.Step, b.Step)
		}
		return cmp.Compare(a.DPRank, b.DPRank)
	})
	return rep, nil
}

// explainRank builds rank r as a session resuming from req.from would,
// moves it to the step before req.first and explains req.first to req.last.
func explainRank(ctx context.Context, corpus *stream.Corpus, roots *files.Roots, from session.Resume, req explainRequest, r uint32) (rankReached, []stream.Piece, error) {
	if from.Sharded != nil { // a DCP checkpoint holds every rank's shards: this rank's, as its load takes them
		mine := from.Sharded.ForRank(r, req.ranks, corpus.Config().LogicalShards)
		from.Sharded = &mine
	}
	rank, err := session.ResumeRank(ctx, corpus, roots, from, r, req.ranks)
	if err != nil {
		return rankReached{}, nil, err
	}
	reached := rankReached{DPRank: r, FromStep: rank.Step(), Counted: rank.SkipsByCounting(),
		BlocklistChanged: from != (session.Resume{}) && rank.BlockReport().Changed}
	if req.first <= rank.Step() {
		return rankReached{}, nil, fmt.Errorf("step %d is not after step %d, where checkpoint %s resumes: explain it from an earlier checkpoint, or from the run's start (no --from)",
			req.first, rank.Step(), req.from)
	}
	start := time.Now()
	if err := rank.SkipTo(ctx, req.first-1); err != nil {
		return rankReached{}, nil, err
	}
	reached.SkipSeconds = time.Since(start).Seconds()
	buf := make([]int32, int(corpus.Config().BatchSize)*corpus.Config().LineTokens())
	var out []stream.Piece
	skips := rank.Skips()
	for s := req.first; s <= req.last; s++ {
		if rank.Step() != s-1 {
			reached.LastStep = rank.Step()
			break
		}
		if skip, ok := state.Skipped(skips, s); ok {
			// The range's batches were made and dropped: the rank passes
			// them as the daemon did (the data steps after are the same).
			to := min(skip.Last, req.last)
			reached.Skipped = append(reached.Skipped, state.SkipRange{First: s, Last: to})
			if err := rank.SkipTo(ctx, to); err != nil {
				return rankReached{}, nil, err
			}
			s = to
			continue
		}
		p, pieces, err := rank.ExplainBatch(buf)
		if err != nil {
			return rankReached{}, nil, err
		}
		if p.Lines == 0 {
			reached.LastStep = rank.Step()
			break
		}
		out = append(out, pieces...)
		if err := ctx.Err(); err != nil {
			return rankReached{}, nil, err
		}
	}
	return reached, out, nil
}

// resumePoint is where the ranks start: the rank files of folder, or the
// loader's state under prefix in the torch.distributed.checkpoint folder
// is; "": the run's start.
func resumePoint(folder, prefix string) (session.Resume, error) {
	if folder == "" {
		if prefix != "" {
			return session.Resume{}, fmt.Errorf("--prefix names a key in the checkpoint --from names")
		}
		return session.Resume{}, nil
	}
	_, err := os.Stat(filepath.Join(folder, state.Dir))
	if !errors.Is(err, os.ErrNotExist) {
		if prefix != "" {
			return session.Resume{}, fmt.Errorf("checkpoint %s holds rank files (%s/): --prefix names a key of a torch.distributed.checkpoint", folder, state.Dir)
		}
		return session.Resume{Folder: folder}, nil
	}
	isDCP, err := dcp.IsCheckpoint(folder)
	if err != nil {
		return session.Resume{}, fmt.Errorf("checkpoint %s: %w", folder, err)
	}
	if !isDCP {
		return session.Resume{}, fmt.Errorf("checkpoint %s has no %s/ directory of rank files (loader.save) and no %s (torch.distributed.checkpoint)",
			folder, state.Dir, dcp.MetadataFile)
	}
	c, err := dcp.Open(folder)
	if err != nil {
		return session.Resume{}, err
	}
	defer c.Close()
	if prefix, err = loaderPrefix(c, prefix); err != nil {
		return session.Resume{}, err
	}
	sharded, err := readSharded(c, prefix)
	if err != nil {
		return session.Resume{}, fmt.Errorf("checkpoint %s, the loader's state under %q: %w", folder, prefix, err)
	}
	return session.Resume{Sharded: &sharded}, nil
}

// readSchedule reads the config's schedule (its weights by dataset name)
// into cfg, as the daemon takes it from the client.
func readSchedule(path string, cfg *stream.Config) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var jc struct {
		Schedule []struct {
			Step    uint64             `json:"step"`
			Weights map[string]float64 `json:"weights"`
			Linear  bool               `json:"linear"`
		} `json:"schedule"`
	}
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&jc); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	for i, p := range jc.Schedule {
		ws, err := stream.WeightsByName(fmt.Sprintf("config %s: schedule[%d] (step %d)", path, i, p.Step), "dataset", cfg.Datasets, p.Weights)
		if err != nil {
			return err
		}
		cfg.Schedule = append(cfg.Schedule, state.SchedulePoint{Step: p.Step, Weights: ws, Linear: p.Linear})
	}
	return nil
}

// printExplained prints a report as a table, a piece a row.
func printExplained(w io.Writer, rep explained) {
	from := "the run's start"
	if rep.From != "" {
		from = "checkpoint " + shown(rep.From)
	}
	fmt.Fprintf(w, "job %s, %d rank(s), from %s\n", rep.JobFingerprint, rep.DPSize, from)
	for _, r := range rep.Ranks {
		how := "batch by batch"
		if r.Counted {
			how = "by counting"
		}
		fmt.Fprintf(w, "rank %d: from step %d to step %d in %.3f s (%s)", r.DPRank, r.FromStep, rep.FirstStep-1, r.SkipSeconds, how)
		if r.LastStep != 0 {
			fmt.Fprintf(w, "; its run ends after step %d", r.LastStep)
		}
		for _, s := range r.Skipped {
			fmt.Fprintf(w, "; %s skipped (skip_steps: made and dropped, never served)", s)
		}
		if r.BlocklistChanged {
			fmt.Fprint(w, "; the config's blocklist is not the checkpoint's: explained as a resume under this config serves them")
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tRANK\tLINE\tCOLUMNS\tDATASET\tDOCUMENT\tTOKENS\tFILE")
	for _, p := range rep.Pieces {
		doc := fmt.Sprint(p.Document)
		switch {
		case p.JSONLLine > 0:
			doc = fmt.Sprintf("line %d", p.JSONLLine)
		case p.ParquetRow != nil:
			doc = fmt.Sprintf("row %d", *p.ParquetRow)
		case p.Document < 0:
			doc = fmt.Sprintf("unit %d doc %d", p.FileUnit, p.UnitDocument)
		}
		toks := fmt.Sprintf("%d-%d", p.TokenStart, p.TokenEnd)
		if p.BOS {
			toks = "BOS+" + toks
		}
		if p.EOS {
			toks += "+EOS"
		}
		if p.Blocked {
			toks += " BLOCKED"
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d-%d\t%s\t%s\t%s\t%s\n", p.Step, p.DPRank, p.Line, p.ColumnStart, p.ColumnEnd,
			shown(p.Dataset), doc, toks, shown(p.File))
	}
	tw.Flush()
}
