package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/ingest/event"
)

func init() {
	register("links", command{
		summary: "print the links of a CAR file, a Jetstream capture or a firehose capture, one JSON object per line",
		run:     runLinks,
	})
}

// jetstreamLineBytesMax bounds one line of a Jetstream capture: the node's
// bound on one event (a 1 MiB record's JSON can take six times its size).
const jetstreamLineBytesMax = event.MaxJetstreamMessageSize

type linkLine struct {
	Source string `json:"source"`
	Path   string `json:"path,omitempty"`
	Target string `json:"target,omitempty"`
	Op     string `json:"op,omitempty"`
}

// linkPrinter turns ops into output lines and counts what it skips.
type linkPrinter struct {
	enc     *json.Encoder
	ex      extract.Extractor
	stream  bool // print op
	events  int
	links   int
	skipped map[string]int
	stats   extract.Stats
}

func (p *linkPrinter) skip(reason string) { p.skipped[reason]++ }

func (p *linkPrinter) op(o *event.Op) error {
	p.events++
	if o.Kind != event.KindCommit {
		return nil
	}
	opName := ""
	if p.stream {
		opName = o.Action.String()
	}
	if o.Action == event.ActionDelete {
		return p.enc.Encode(linkLine{Source: o.URI(), Op: opName})
	}
	if o.Skip != "" {
		p.skip(o.Skip)
		return nil
	}
	if o.Record == nil {
		p.skip("record_missing")
		return nil
	}
	links, st := p.ex.Extract(o.Record)
	p.stats.Add(st)
	for _, l := range links {
		p.links++
		if err := p.enc.Encode(linkLine{Source: o.URI(), Path: l.Path, Target: l.Target.Norm, Op: opName}); err != nil {
			return err
		}
	}
	return nil
}

func runLinks(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("links", flag.ContinueOnError)
	fs.SetOutput(stderr)
	car := fs.String("car", "", "a repository CAR file")
	js := fs.String("jetstream", "", "a Jetstream v1 capture: one JSON event per line")
	fh := fs.String("firehose", "", "a relay firehose capture: frames stored as [u32 little-endian length][frame]")
	quiet := fs.Bool("quiet", false, "do not print the summary on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	n := 0
	for _, s := range []string{*car, *js, *fh} {
		if s != "" {
			n++
		}
	}
	if n != 1 || fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("give exactly one of --car, --jetstream, --firehose: %w", errUsage)
	}
	bw := bufio.NewWriterSize(stdout, 64<<10)
	defer bw.Flush()
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	p := &linkPrinter{enc: enc, skipped: map[string]int{}}
	var err error
	switch {
	case *car != "":
		var info event.CARInfo
		info, err = linksCAR(*car, p)
		if err == nil && len(info.Missing) > 0 {
			fmt.Fprintf(stderr, "eddy-ctl links: %s is a partial repository: %d blocks missing\n", *car, len(info.Missing))
		}
	case *js != "":
		p.stream = true
		err = linksJetstream(ctx, *js, p, stderr)
	default:
		p.stream = true
		err = linksFirehose(ctx, *fh, p, stderr)
	}
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if !*quiet {
		fmt.Fprintf(stderr, "eddy-ctl links: %d events, %d links", p.events, p.links)
		reasons := make([]string, 0, len(p.skipped))
		for r := range p.skipped {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		for _, r := range reasons {
			fmt.Fprintf(stderr, ", skipped %s: %d", r, p.skipped[r])
		}
		st := p.stats
		if d := st.TooDeep + st.TooManyLinks + st.PathTooLong + st.TargetTooLong + st.Invalid; d > 0 {
			fmt.Fprintf(stderr, ", dropped link-like strings: %d (invalid %d, too long %d, too deep %d, too many %d, path too long %d)",
				d, st.Invalid, st.TargetTooLong, st.TooDeep, st.TooManyLinks, st.PathTooLong)
		}
		fmt.Fprintln(stderr)
	}
	return nil
}

func linksCAR(path string, p *linkPrinter) (event.CARInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return event.CARInfo{}, err
	}
	defer f.Close()
	return event.ReadCAR(bufio.NewReader(f), p.op)
}

func linksJetstream(ctx context.Context, path string, p *linkPrinter, stderr io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), jetstreamLineBytesMax)
	line := 0
	for sc.Scan() {
		line++
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if len(sc.Bytes()) == 0 {
			continue
		}
		o, err := event.DecodeJetstream(sc.Bytes())
		if err != nil {
			p.skip("bad_event")
			fmt.Fprintf(stderr, "eddy-ctl links: %s line %d: %v\n", path, line, err)
			continue
		}
		if err := p.op(&o); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s line %d: %w", path, line+1, err)
	}
	return nil
}

func linksFirehose(ctx context.Context, path string, p *linkPrinter, stderr io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	frame := 0
	return event.ReadFrames(bufio.NewReader(f), func(b []byte) error {
		frame++
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err := event.DecodeFrame(b, p.op)
		var se *event.StreamError
		var info *event.Info
		switch {
		case err == nil, errors.As(err, &info): // a relay's notice: no links
		case errors.As(err, &se):
			p.skip("stream_error")
			fmt.Fprintf(stderr, "eddy-ctl links: %s frame %d: %v\n", path, frame, err)
		default:
			p.skip("bad_frame")
			fmt.Fprintf(stderr, "eddy-ctl links: %s frame %d: %v\n", path, frame, err)
		}
		return nil
	})
}
