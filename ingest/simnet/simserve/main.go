// Command simserve serves a simulated atproto network (package simnet) in a
// process of its own, so that a benchmark or a test measuring Eddy's CPU
// does not count the network's (building each repository's MST and CAR on
// request, encoding stream frames).
//
// It is test support: the node binary never imports it and `make build`
// does not build it. Usage:
//
//	simserve --seed 4 --accounts 1000 --steps 100000 [--exit-on-stdin-eof]
//
// It builds the World, applies --steps operations, serves it on 127.0.0.1
// and prints one JSON line on stdout naming its URLs and the world's size:
//
//	{"plc":"http://127.0.0.1:…","relay":"…","firehose":"ws://…","jetstream":"ws://…","pds":["…"],"accounts":1000,"records":…,"steps":100000}
//
// It then serves until it is killed (SIGINT and SIGTERM close the servers
// first) or, with --exit-on-stdin-eof, until its standard input reaches its
// end: a parent that holds the write end of a pipe never leaves it behind.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/eddy-backlinks/eddy/ingest/simnet"
)

// Ready is the JSON line printed once the network is served.
type Ready struct {
	PLC       string   `json:"plc"`
	Relay     string   `json:"relay"`
	Firehose  string   `json:"firehose"`
	Jetstream string   `json:"jetstream"`
	PDS       []string `json:"pds"`
	Accounts  int      `json:"accounts"`
	Records   int      `json:"records"`
	Steps     int      `json:"steps"`
}

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "simserve:", err)
		os.Exit(2)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("simserve", flag.ContinueOnError)
	seed := fs.Int64("seed", 1, "the world's seed")
	accounts := fs.Int("accounts", 200, "accounts (all created before the first step)")
	pdses := fs.Int("pdses", 0, "PDS hosts (0: simnet's default)")
	steps := fs.Int("steps", 10000, "operations applied before serving")
	verifiable := fs.Bool("verifiable", false, "sign commits for real and send MST proofs on the firehose (simnet.Config.Verifiable)")
	webPercent := fs.Int("web-percent", 0, "share of did:web accounts in percent (0: simnet's default; negative: none)")
	stdinEOF := fs.Bool("exit-on-stdin-eof", false, "exit when standard input reaches its end")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *accounts <= 0 || *steps < 0 || *pdses < 0 {
		return fmt.Errorf("--accounts must be positive, --steps and --pdses not negative")
	}
	world := simnet.NewWorld(simnet.Config{Seed: *seed, Accounts: *accounts, PDSes: *pdses, Verifiable: *verifiable, WebPercent: *webPercent})
	world.Step(*steps)
	sim, err := simnet.Serve(world)
	if err != nil {
		return err
	}
	defer sim.Close()
	cfg := world.Config()
	ready := Ready{
		PLC: sim.PLCURL(), Relay: sim.RelayURL(), Firehose: sim.FirehoseURL(), Jetstream: sim.JetstreamURL(),
		Accounts: cfg.Accounts, Records: world.RecordCount(), Steps: world.Steps(),
	}
	for i := 0; i < cfg.PDSes; i++ {
		ready.PDS = append(ready.PDS, sim.PDSURL(i))
	}
	line, err := json.Marshal(ready)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
		return err
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	eof := make(chan struct{})
	if *stdinEOF {
		go func() {
			io.Copy(io.Discard, stdin)
			close(eof)
		}()
	}
	select {
	case <-stop:
	case <-eof:
	}
	return nil
}
