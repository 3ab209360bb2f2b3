// Package cliflag holds what the command-line tools share in parsing their
// flags.
package cliflag

import (
	"errors"
	"flag"
	"fmt"
)

// Parse parses args into fs: -h gives flag.ErrHelp; a bad flag or a stray
// argument is usage (the tool's usage error) wrapping what was wrong.
func Parse(fs *flag.FlagSet, args []string, usage error) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", usage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", usage, fs.Args())
	}
	return nil
}
