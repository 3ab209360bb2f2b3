package cliflag

import (
	"errors"
	"flag"
	"io"
	"testing"
)

func TestParse(t *testing.T) {
	usage := errors.New("usage")
	for _, c := range []struct {
		args []string
		want error
	}{
		{[]string{"-n", "3"}, nil},
		{[]string{"-h"}, flag.ErrHelp},
		{[]string{"-nope"}, usage},
		{[]string{"-n", "x"}, usage},
		{[]string{"stray"}, usage},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		n := fs.Int("n", 0, "")
		err := Parse(fs, c.args, usage)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%q: %v, want %v", c.args, err, c.want)
		}
		if c.want == nil && *n != 3 {
			t.Errorf("%q: n = %d", c.args, *n)
		}
	}
}
