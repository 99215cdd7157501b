package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `dataloaderd: a per-node data loader daemon for LLM training.

Usage:
  dataloaderd serve [flags]        run the daemon (see 'dataloaderd serve -h')
  dataloaderd healthcheck [flags]  exit 0 when the daemon answers SERVING, 1 otherwise
  dataloaderd prepare [flags]      tokenize JSONL/Parquet text into Megatron .bin/.idx (see 'dataloaderd prepare -h')
  dataloaderd inspect CHECKPOINT   show a checkpoint's loader state: step, datasets, mixture history
  dataloaderd plan --ranks N CONFIG  show a job's working set in the node's object cache (see 'dataloaderd plan -h')
  dataloaderd explain --ranks W --step N CONFIG  show which documents made step N's batches (see 'dataloaderd explain -h')
  dataloaderd version              print the version (also: dataloaderd --version)
  dataloaderd watch [flags]        the lifeline of deploy/torchrun-with-dataloaderd.sh (see 'dataloaderd watch -h')

'dataloaderd COMMAND -h' prints a command's flags.
`

// run is the whole program; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stderr)
	case "healthcheck":
		err = healthcheck(ctx, args[1:], stdout, stderr)
	case "prepare":
		err = prepareCmd(ctx, args[1:], stdout, stderr)
	case "inspect":
		err = inspectCmd(ctx, args[1:], stdout, stderr)
	case "plan":
		err = planCmd(ctx, args[1:], stdout, stderr)
	case "explain":
		err = explainCmd(ctx, args[1:], stdout, stderr)
	case "watch":
		err = watchCmd(ctx, args[1:], stderr)
	case "version", "--version", "-version":
		err = versionCmd(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "dataloaderd: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	var help *helpError
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return 0
	case errors.As(err, &help):
		fmt.Fprint(stdout, help.usage)
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintln(stderr, "dataloaderd:", err)
		return 1
	}
}

// versionCmd prints the version (see versionString).
func versionCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parseFlags(fs, "Usage:\n  dataloaderd version\n", args, stderr); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "dataloaderd", versionString())
	return nil
}

// defaultSocket is $XDG_RUNTIME_DIR/dataloaderd/dataloaderd.sock, or under
// /run/dataloaderd when that is not set.
func defaultSocket() string {
	if d := os.Getenv("DATALOADERD_SOCKET"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return d + "/dataloaderd/dataloaderd.sock"
	}
	return "/run/dataloaderd/dataloaderd.sock"
}
