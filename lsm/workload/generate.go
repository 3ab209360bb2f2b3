package workload

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/eddy-backlinks/eddy/link"
)

type account struct {
	did   string
	field uint64 // encoded did field
	clock uint
}

// weighted picks indexes by weight.
type weighted struct {
	cum []float64
}

func newWeighted(ws []float64) weighted {
	w := weighted{cum: make([]float64, len(ws))}
	t := 0.0
	for i, x := range ws {
		t += x
		w.cum[i] = t
	}
	return w
}

func (w weighted) pick(r *rand.Rand) int {
	x := r.Float64() * w.cum[len(w.cum)-1]
	i, _ := slices.BinarySearch(w.cum, x)
	return min(i, len(w.cum)-1)
}

// zipfPool draws target indexes of one pool by Zipf popularity.
type zipfPool struct {
	targets []int32
	z       *rand.Zipf
}

func (p *zipfPool) draw() int32 {
	if len(p.targets) == 1 {
		return p.targets[0]
	}
	return p.targets[p.z.Uint64()]
}

type gen struct {
	r        *rand.Rand
	codec    *link.Codec
	plc      *PLCMap
	accounts []account
	w        *Workload
	seen     map[link.RecordID]bool
}

const base32Sort = "abcdefghijklmnopqrstuvwxyz234567"

func (g *gen) makeAccounts(n int) error {
	g.accounts = make([]account, n)
	usedSeq := map[uint64]bool{}
	usedDID := map[string]bool{}
	var b [24]byte
	for i := range g.accounts {
		a := &g.accounts[i]
		a.clock = uint(g.r.IntN(1024))
		switch x := g.r.Float64(); {
		case x < 0.02:
			a.did = fmt.Sprintf("did:web:%s%d.%s", words[g.r.IntN(len(words))], i, []string{"example.com", "blog.example.org", "pds.dev", "social.coop"}[g.r.IntN(4)])
		default:
			for {
				for j := range b {
					b[j] = base32Sort[g.r.IntN(32)]
				}
				a.did = "did:plc:" + string(b[:])
				if !usedDID[a.did] {
					break
				}
			}
			if x >= 0.03 { // 97%: known to the PLC directory
				for {
					seq := 1 + g.r.Uint64N(50_000_000)
					if !usedSeq[seq] {
						usedSeq[seq] = true
						g.plc.Add(a.did, seq)
						break
					}
				}
			}
		}
		usedDID[a.did] = true
		f, err := g.codec.DID(a.did, true)
		if err != nil {
			return err
		}
		a.field = f
	}
	g.w.Accounts = n
	return nil
}

func (g *gen) tid(micros int64, clock uint) (uint64, string) {
	t := syntax.NewTID(micros, clock)
	return t.Integer(), t.String()
}

// recordTarget makes a new record target of a collection by an author.
func (g *gen) recordTarget(author int, nsid string, micros int64) (Target, error) {
	a := &g.accounts[author]
	for {
		v, s := g.tid(micros, a.clock)
		col, err := g.codec.Collection(nsid, true)
		if err != nil {
			return Target{}, err
		}
		id := link.RecordID{RKey: v, Collection: col, DID: a.field}
		if g.seen[id] {
			micros++
			continue
		}
		g.seen[id] = true
		return Target{ID: id, Kind: TargetRecord, Text: "at://" + a.did + "/" + nsid + "/" + s}, nil
	}
}

func (g *gen) addTarget(t Target) int32 {
	g.w.Targets = append(g.w.Targets, t)
	return int32(len(g.w.Targets) - 1)
}

func (g *gen) newZipfPool(targets []int32) *zipfPool {
	p := &zipfPool{targets: targets}
	if len(targets) > 1 {
		p.z = rand.NewZipf(g.r, targetZipfS, 1, uint64(len(targets)-1))
	}
	return p
}

func (g *gen) makeTargets(n int) ([]*zipfPool, error) {
	startMicros := Start.UnixMicro()
	const week = int64(7 * 24 * time.Hour / time.Microsecond)
	authorPerm := g.r.Perm(len(g.accounts))
	authorZipf := rand.NewZipf(g.r, targetZipfS, authorZipfV, uint64(len(g.accounts)-1))

	// The mega target: a post of the most popular author, a day old.
	mega, err := g.recordTarget(authorPerm[0], "app.bsky.feed.post", startMicros-int64(24*time.Hour/time.Microsecond))
	if err != nil {
		return nil, err
	}
	g.w.Mega = g.addTarget(mega)

	pools := make([]*zipfPool, numPools)
	nRecords := int(float64(n) * shareRecords)
	var totalShare float64
	for _, rp := range recordPools {
		totalShare += rp.share
	}
	for _, rp := range recordPools {
		k := max(1, int(float64(nRecords)*rp.share/totalShare))
		idx := make([]int32, k)
		for i := range idx {
			author := authorPerm[authorZipf.Uint64()]
			t, err := g.recordTarget(author, rp.collection, startMicros-g.r.Int64N(week))
			if err != nil {
				return nil, err
			}
			idx[i] = g.addTarget(t)
		}
		pools[rp.pool] = g.newZipfPool(idx)
	}

	nAccounts := max(1, min(int(float64(n)*shareAccounts), len(g.accounts)))
	accPerm := g.r.Perm(len(g.accounts))
	idx := make([]int32, nAccounts)
	for i := range idx {
		a := &g.accounts[accPerm[i]]
		idx[i] = g.addTarget(Target{ID: link.RepoID(a.field), Kind: TargetAccount, Text: a.did})
	}
	pools[poolAccount] = g.newZipfPool(idx)

	nURLs := max(1, int(float64(n)*shareURLs))
	seenURL := map[string]bool{}
	idx = make([]int32, 0, nURLs)
	for len(idx) < nURLs {
		norm, err := link.NormalizeURL(g.url())
		if err != nil {
			return nil, fmt.Errorf("workload: generated URL: %w", err)
		}
		if seenURL[norm] {
			continue
		}
		seenURL[norm] = true
		idx = append(idx, g.addTarget(Target{ID: link.HashTarget(norm), Kind: TargetURL, Text: norm}))
	}
	pools[poolURL] = g.newZipfPool(idx)
	return pools, nil
}

const idChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

func (g *gen) randID(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = idChars[g.r.IntN(len(idChars))]
	}
	return string(b)
}

func (g *gen) word() string { return words[g.r.IntN(len(words))] }

func (g *gen) slug() string {
	n := 2 + g.r.IntN(5)
	parts := make([]string, n)
	for i := range parts {
		parts[i] = g.word()
	}
	return strings.Join(parts, "-")
}

// url returns a random https URL shaped like the links people post.
func (g *gen) url() string {
	host := urlHosts[g.r.IntN(len(urlHosts))]
	switch host {
	case "www.youtube.com":
		return "https://" + host + "/watch?v=" + g.randID(11)
	case "youtu.be":
		return "https://" + host + "/" + g.randID(11) + "?si=" + g.randID(16)
	case "github.com", "tangled.sh":
		return "https://" + host + "/" + g.word() + strconv.Itoa(g.r.IntN(100000)) + "/" + g.word()
	case "en.wikipedia.org":
		w := g.word()
		return "https://" + host + "/wiki/" + strings.ToUpper(w[:1]) + w[1:] + "_" + g.word() + "_" + strconv.Itoa(1900+g.r.IntN(126))
	case "arxiv.org":
		return fmt.Sprintf("https://%s/abs/25%02d.%05d", host, 1+g.r.IntN(12), g.r.IntN(100000))
	case "bsky.app":
		return "https://" + host + "/profile/" + g.word() + strconv.Itoa(g.r.IntN(100000)) + ".bsky.social/post/" + strings.ToLower(g.randID(13))
	case "open.spotify.com":
		return "https://" + host + "/track/" + g.randID(22)
	default:
		return fmt.Sprintf("https://%s/2025/%02d/%02d/%s-%d", host, 1+g.r.IntN(12), 1+g.r.IntN(28), g.slug(), g.r.IntN(1_000_000))
	}
}
