package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
)

// errUsage is a command line that does not parse: run exits 2, the usage
// having gone to stderr.
var errUsage = errors.New("usage")

// helpError is a request for a command's usage (-h, --help): run prints
// the text on stdout and exits 0.
type helpError struct{ usage string }

func (h *helpError) Error() string { return "help requested" }

const serveUsage = `dataloaderd serve: run the daemon.

Usage:
  dataloaderd serve [flags]

Settings come from --config (a JSON file) first, then the flags; the README's
"Daemon flags" table documents each of them.

Flags:
`

const healthcheckUsage = `dataloaderd healthcheck: ask a daemon whether it is ready.

Usage:
  dataloaderd healthcheck [--socket S] [--timeout 3s]

Prints SERVING and exits 0 when the daemon answers SERVING; exits 1 otherwise.

Flags:
`

// parseFlags parses a subcommand's args into fs, whose usage is head then
// the flags' defaults. The flag package writes its usage, and a parse error,
// to the set's output: parseFlags holds that text back and routes it. A
// request for help returns a *helpError carrying the usage (stdout, exit 0);
// a bad flag writes the error and the usage to stderr and returns errUsage
// (exit 2). Later calls of fs.Usage write to stderr.
func parseFlags(fs *flag.FlagSet, head string, args []string, stderr io.Writer) error {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), head)
		fs.PrintDefaults()
	}
	var held bytes.Buffer
	fs.SetOutput(&held)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		return &helpError{usage: held.String()}
	default:
		stderr.Write(held.Bytes())
		return errUsage
	}
}

// noArgs refuses the positional arguments of a subcommand that takes none.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() == 0 {
		return nil
	}
	fmt.Fprintf(fs.Output(), "%s takes no arguments, got %q\n", fs.Name(), fs.Args())
	fs.Usage()
	return errUsage
}
