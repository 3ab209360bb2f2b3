package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// The benchmark lives in package bench and its own binary, eddy-bench
// (cmd/bench), so that Pebble is not linked into eddy-ctl. `eddy-ctl bench
// ...` runs eddy-bench with the same arguments and output.
func init() {
	register("bench", command{
		summary: "run a benchmark: bench lsm --links N [--store file|s3|URL] [--seed S] [--json]",
		run:     runBench,
	})
}

// The environment eddy-bench reads when run by this shim (cmd/bench/main.go):
// the name to print in its usage text, and the descriptor to write its
// final error to, which the shim returns as its own error (so eddy-ctl
// prints it, with the exit code 2 for bad arguments, as before the move).
const (
	benchEnvName    = "EDDY_BENCH_NAME"
	benchEnvErrorFD = "EDDY_BENCH_ERROR_FD"
)

// benchError is eddy-bench's final error, as it wrote it.
type benchError struct {
	msg   string
	usage bool // eddy-bench exited 2: bad arguments
}

func (e *benchError) Error() string { return e.msg }

func (e *benchError) Unwrap() error {
	if e.usage {
		return errUsage
	}
	return nil
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	path, err := findBench()
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.ExtraFiles = []*os.File{w} // descriptor 3 in eddy-bench
	cmd.Env = append(os.Environ(), benchEnvName+"=eddy-ctl bench", benchEnvErrorFD+"=3")
	// On SIGINT or SIGTERM, let eddy-bench stop as it would alone (and
	// remove its temporary files) rather than kill it.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("running %s: %w", path, err)
	}
	w.Close()
	msgc := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		msgc <- b
	}()
	err = cmd.Wait()
	msg := string(<-msgc)
	var exit *exec.ExitError
	switch {
	case err == nil, cmd.ProcessState != nil && cmd.ProcessState.Success(): // success, even if a signal came at the end
		return nil
	case !errors.As(err, &exit):
		return fmt.Errorf("running %s: %w", path, err)
	case msg == "":
		return fmt.Errorf("%s: %v", path, err) // crashed or killed without a word
	default:
		return &benchError{msg: msg, usage: exit.ExitCode() == 2}
	}
}

// findBench returns the eddy-bench binary: the one next to this executable
// (make build puts both in bin/), else the first on PATH.
func findBench() (string, error) {
	var dir string
	if exe, err := os.Executable(); err == nil {
		dir = filepath.Dir(exe)
		if p, err := exec.LookPath(filepath.Join(dir, "eddy-bench")); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("eddy-bench"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("eddy-bench not found: run make build (looked in %s and on PATH)", dir)
}
