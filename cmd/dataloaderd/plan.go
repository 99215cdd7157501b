package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

const planUsage = `dataloaderd plan: show what a job needs of a node's object cache.

Usage:
  dataloaderd plan --ranks N [--world W] [--object-cache-mb MB] [--object-block-kb KB] [--json] CONFIG

CONFIG is a job config in JSON, as the Python client reads it (seq_len,
batch_size, logical_shards, shuffle_window, eos_id, datasets, ...; relative
paths are against the file's folder). plan opens the datasets as a session
would (their indices only; s3:// ones through the AWS configuration the
daemon would use) and prints the working set of the node's N ranks of a
world of W: each dataset's indices, and for every shard those ranks own, its
open shuffle window and the next one, or the units fetched ahead of it when
more (the daemon's prefetch depth of 1,024 units a rank, shared among its
shards, at most 64 a shard). A cache smaller than the working set
evicts blocks before they are read and fetches them again. A dataset larger
than the cache read without run_tokens is named too: each epoch of it
fetches about a cache block per document. Exits 1 when the working set is
larger than --object-cache-mb, or a dataset is so named. No daemon is needed.

Flags:
`

// planReport is what plan prints, also its --json form.
type planReport struct {
	Ranks      uint32                     `json:"ranks"`
	World      uint32                     `json:"world"`
	CacheBytes int64                      `json:"object_cache_bytes"`
	BlockBytes int64                      `json:"object_block_bytes"`
	Bytes      int64                      `json:"working_set_bytes"`
	RunTokens  uint64                     `json:"run_tokens"`
	Datasets   []stream.DatasetWorkingSet `json:"datasets"`
	// Refetched names the datasets an epoch fetches about a block per
	// document of (stream.DatasetWorkingSet.Refetched).
	Refetched []string `json:"refetched_datasets"`
}

// errRefetched is plan's answer when an epoch fetches a dataset's blocks
// again and again.
var errRefetched = errors.New("a dataset larger than the object cache is read without run_tokens")

// errOverCache is plan's answer when the working set is past the cache.
var errOverCache = errors.New("the working set is larger than the object cache")

func planCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	ranks := fs.Uint("ranks", 0, "ranks of the job on the node (required)")
	world := fs.Uint("world", 0, "ranks of the job in all (default: --ranks)")
	cacheMB := fs.Int("object-cache-mb", objstore.DefaultMemoryBytes>>20, "the node's object cache, as the daemon's flag")
	blockKB := fs.Int("object-block-kb", objstore.DefaultBlockSize>>10, "the cache's block, as the daemon's flag")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, planUsage, args, stderr); err != nil {
		return err
	}
	if fs.NArg() != 1 || *ranks == 0 || *ranks > 1<<20 || *world > 1<<20 || *cacheMB <= 0 || *blockKB <= 0 {
		fmt.Fprint(stderr, "dataloaderd plan: name one config file, and --ranks of at least 1 (and --world, when given, at least --ranks)\n\n", planUsage)
		return errUsage
	}
	if *world == 0 {
		*world = *ranks
	}
	if *world < *ranks {
		fmt.Fprint(stderr, "dataloaderd plan: --world must be at least --ranks\n\n", planUsage)
		return errUsage
	}
	rep, err := plan(ctx, fs.Arg(0), uint32(*ranks), uint32(*world), int64(*cacheMB)<<20, int64(*blockKB)<<10)
	if err != nil {
		return escapedError{err}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		printPlan(stdout, rep)
	}
	if err == nil && rep.Bytes > rep.CacheBytes {
		err = fmt.Errorf("%w: %d bytes against %d: raise the daemon's --object-cache-mb (or --object-cache-disk-mb with --object-cache-dir), or lower shuffle_window",
			errOverCache, rep.Bytes, rep.CacheBytes)
	}
	if err == nil && len(rep.Refetched) > 0 {
		err = fmt.Errorf("%w: %s: each epoch fetches about a block per document; set the job's run_tokens (docs/objects.md, \"Reading in runs\")",
			errRefetched, strings.Join(rep.Refetched, ", "))
	}
	return err
}

// plan opens the config's datasets and works out the working set of ranks
// 0..ranks-1 of world.
func plan(ctx context.Context, path string, ranks, world uint32, cache, block int64) (planReport, error) {
	cfg, err := readJobConfig(path)
	if err != nil {
		return planReport{}, err
	}
	if err := cfg.ValidateRank(world-1, world); err != nil {
		return planReport{}, err
	}
	res := stream.NewResources(1, 16<<20, nil)
	defer res.Close()
	if res.Roots, err = files.NewRoots(nil); err != nil {
		return planReport{}, err
	}
	for _, d := range cfg.Datasets {
		if objstore.IsURL(d.Path) {
			store, err := objstore.New(objstore.Options{MemoryBytes: cache, BlockSize: block})
			if err != nil {
				return planReport{}, err
			}
			defer store.Close()
			res.Roots = res.Roots.WithObjects(store)
			break
		}
	}
	corpus, err := stream.OpenCorpusContext(ctx, cfg, res)
	if err != nil {
		return planReport{}, err
	}
	defer corpus.Close()
	own := make([]uint32, ranks)
	for i := range own {
		own[i] = uint32(i)
	}
	ws := corpus.WorkingSet(own, world, block)
	rep := planReport{Ranks: ranks, World: world, CacheBytes: cache, BlockBytes: block, Bytes: ws.AllBytes, RunTokens: ws.RunTokens,
		Datasets: ws.Datasets, Refetched: []string{}}
	for _, d := range ws.Datasets {
		if d.Refetched(ws.RunTokens, cache) {
			rep.Refetched = append(rep.Refetched, d.Name)
		}
	}
	return rep, nil
}

// printPlan prints a plan as a table.
func printPlan(w io.Writer, rep planReport) {
	fmt.Fprintf(w, "%d ranks of %d on the node, object cache %s in blocks of %s\n\n", rep.Ranks, rep.World, mib(rep.CacheBytes), mib(rep.BlockBytes))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DATASET\tSHARDS\tWINDOW\tINDEX\tWORKING SET")
	for _, d := range rep.Datasets {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", d.Name, d.Shards, mib(d.WindowBytes), mib(d.IndexBytes), mib(d.Bytes))
	}
	tw.Flush()
	verdict := "fits"
	if rep.Bytes > rep.CacheBytes {
		verdict = "does NOT fit: blocks will be evicted before they are read; raise --object-cache-mb (or --object-cache-disk-mb with --object-cache-dir), or lower shuffle_window"
	}
	fmt.Fprintf(w, "\nworking set %s; the cache of %s %s\n", mib(rep.Bytes), mib(rep.CacheBytes), verdict)
	for _, name := range rep.Refetched {
		fmt.Fprintf(w, "dataset %s is larger than the cache and read without run_tokens: each epoch fetches about a %s block per document\n",
			name, mib(rep.BlockBytes))
	}
}

// mib writes bytes in MiB.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
