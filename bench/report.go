package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
)

// printText prints the result without --json: a line per JSON field,
// sorted by name, whole numbers without decimals.
func printText(w io.Writer, res *Result) {
	b, _ := json.Marshal(res)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	for _, k := range keys {
		v := m[k]
		switch x := v.(type) {
		case float64:
			if x == math.Trunc(x) && math.Abs(x) < 1e15 {
				fmt.Fprintf(&buf, "%-36s %d\n", k, int64(x))
			} else {
				fmt.Fprintf(&buf, "%-36s %.3f\n", k, x)
			}
		default:
			vb, _ := json.Marshal(v)
			fmt.Fprintf(&buf, "%-36s %s\n", k, vb)
		}
	}
	w.Write(buf.Bytes())
}
