// Command eddy-node runs one node of an Eddy cluster.
//
// The cluster, ingest and query services are wired here as they land; this
// build knows its version and its flags, and refuses to start a node it
// cannot yet run rather than pretend to.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/eddy-backlinks/eddy/version"
)

func main() {
	fs := flag.NewFlagSet("eddy-node", flag.ContinueOnError)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if *showVersion {
		fmt.Println(version.Version)
		return
	}
	fmt.Fprintln(os.Stderr, "eddy-node: the cluster node is not built yet in this version; see README.md for what runs today (eddy-ctl links)")
	os.Exit(1)
}
