package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/server"
)

// healthcheck asks the daemon's grpc.health.v1 service; nil only for SERVING.
func healthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	socket := fs.String("socket", defaultSocket(), "the daemon's unix socket")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	if err := parseFlags(fs, healthcheckUsage, args, stderr); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := server.Healthcheck(ctx, *socket); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "SERVING")
	return nil
}
