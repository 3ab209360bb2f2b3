package main

import (
	"strings"
	"testing"
)

// A command with subcommands given -h prints its usage and where each
// subcommand's flags are, and exits 0, as every other command's -h does;
// before, it printed an empty flag list and exited 2.
func TestSubcommandHelp(t *testing.T) {
	for cmd, want := range map[string]string{
		"backfill": "eddy-ctl backfill restart -h",
		"tables":   "eddy-ctl tables drop -h",
		"local":    "eddy-ctl local up -h",
	} {
		for _, h := range []string{"-h", "--help"} {
			if code, _, errs := ctl(t, cmd, h); code != 0 || !strings.Contains(errs, want) {
				t.Errorf("%s %s: exit %d: %s", cmd, h, code, errs)
			}
		}
		if code, _, _ := ctl(t, cmd); code != 2 {
			t.Errorf("%s without a subcommand: exit %d, want 2", cmd, code)
		}
	}
}
