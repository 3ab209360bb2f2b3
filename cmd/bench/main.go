// Command eddy-bench runs Eddy's benchmarks: `eddy-bench lsm [flags]`
// (package bench; `eddy-bench -h` for the flags). It is a binary of its
// own so that Pebble, the comparison, is linked into it and not into the
// operator tool: `eddy-ctl bench ...` runs this binary (cmd/ctl/bench.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/eddy-backlinks/eddy/bench"
)

// What eddy-ctl's shim sets (cmd/ctl/bench.go, which does not import
// this package): the command name to print in the usage text, and a file
// descriptor to write the final error to instead of stderr, so eddy-ctl
// reports it as its own (the output is then the same as when the bench
// was part of eddy-ctl).
const (
	envName    = "EDDY_BENCH_NAME"
	envErrorFD = "EDDY_BENCH_ERROR_FD"
)

func main() {
	name := "eddy-bench"
	if n := os.Getenv(envName); n != "" {
		name = n
	}
	errFile := errorFile()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := bench.Main(ctx, name, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(report(err, name, os.Stderr, errFile))
}

// report writes err (to errFile if not nil, else to stderr as "name:
// err") and returns the exit code: 0 for none or -h, 2 for bad
// arguments, 1 otherwise.
func report(err error, name string, stderr io.Writer, errFile *os.File) int {
	if errFile != nil {
		defer errFile.Close()
	}
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errFile != nil {
		fmt.Fprint(errFile, err.Error())
	} else {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
	}
	if errors.Is(err, bench.ErrUsage) {
		return 2
	}
	return 1
}

// errorFile is the descriptor named by EDDY_BENCH_ERROR_FD, or nil. It is
// marked close-on-exec, so that the processes the bench starts (MinIO)
// do not hold it open after eddy-bench exits.
func errorFile() *os.File {
	fd, err := strconv.Atoi(os.Getenv(envErrorFD))
	if err != nil || fd < 3 {
		return nil
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "error")
}
