// Command dataloaderd is the per-node data loader daemon: it serves exact,
// shuffled, mixed, packed token batches to the local training ranks over
// gRPC on a unix socket and shared memory.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
