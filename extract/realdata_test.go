package extract_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/ingest/event"
)

// No link of any real record in testdata/ is dropped by a limit: every
// record of every CAR file, Jetstream capture, firehose capture and derived
// record list is extracted with nothing counted as dropped. (Invalid
// link-like strings are not links and are not drops.)
func TestNoRealLinkDropped(t *testing.T) {
	var ex extract.Extractor
	var records, links, longest int
	check := func(where string, rec map[string]any) {
		t.Helper()
		records++
		ls, st := ex.Extract(rec)
		links += len(ls)
		for _, l := range ls {
			longest = max(longest, len(l.Path))
		}
		if st.TooDeep+st.PathTooLong+st.TooManyLinks+st.TargetTooLong > 0 {
			t.Errorf("%s: links dropped by a limit: %+v", where, st)
		}
	}
	op := func(where string) func(*event.Op) error {
		return func(o *event.Op) error {
			if o.Kind == event.KindCommit && o.Record != nil {
				check(where+" "+o.URI(), o.Record)
			}
			return nil
		}
	}
	root := "../testdata"
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case strings.HasSuffix(p, ".car") || strings.HasSuffix(p, ".repo"):
			if _, err := event.DecodeCAR(b, op(p)); err != nil {
				t.Logf("%s: %v (records before the error were checked)", p, err)
			}
		case strings.HasSuffix(p, "frames.bin"):
			err := event.ReadFrames(bytes.NewReader(b), func(frame []byte) error { return event.DecodeFrame(frame, op(p)) })
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
		case strings.HasSuffix(p, ".jsonl"):
			sc := bufio.NewScanner(bytes.NewReader(b))
			sc.Buffer(nil, 4<<20)
			for sc.Scan() {
				line := sc.Bytes()
				var derived struct {
					Record json.RawMessage `json:"record"`
				}
				if json.Unmarshal(line, &derived) == nil && len(derived.Record) > 0 {
					rec, err := atdata.UnmarshalJSON(derived.Record)
					if err != nil {
						t.Fatalf("%s: %v", p, err)
					}
					check(p, rec)
					continue
				}
				if o, err := event.DecodeJetstream(line); err == nil {
					_ = op(p)(&o)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d real records, %d links, longest path %d bytes", records, links, longest)
	// The floors: what testdata/ held when the test was written (1,355
	// records, 1,367 links); an extractor that found nothing drops nothing.
	if records < 1355 || links < 1367 {
		t.Fatalf("%d records and %d links read from testdata/, want at least 1,355 and 1,367", records, links)
	}
}
