package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm/workload"
	"github.com/eddy-backlinks/eddy/objstore/miniotest"
)

// pgServer is a PostgreSQL server the bench started (initdb, pg_ctl) in
// a directory of its own, on 127.0.0.1 and a free port.
type pgServer struct {
	data, bin string
	asUser    bool   // run the tools as the postgres user (initdb refuses root)
	tmp       string // a directory stop removes
	dsn       string
}

// pgConf is the server's configuration: the machine's memory given to
// it as an expert would for a bulk load and its queries (2 cores, 24
// GiB; a node of the issue has 2-4 GB, so 1 GB of shared buffers).
var pgConf = []string{
	"shared_buffers = '1GB'",
	"effective_cache_size = '4GB'",
	"work_mem = '64MB'",
	"maintenance_work_mem = '1GB'",
	"synchronous_commit = off",
	"wal_level = minimal",
	"max_wal_senders = 0",
	"max_wal_size = '8GB'",
	"checkpoint_timeout = '30min'",
	"wal_compression = on",
	"max_connections = 20",
	"max_parallel_workers_per_gather = 2",
}

func findPGBin(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	for _, d := range []string{"/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin"} {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("initdb not found on PATH or in /usr/lib/postgresql/15/bin (install PostgreSQL 15, or pass --pg-bin)")
}

// startPG initialises and starts a server in dir.
func startPG(ctx context.Context, dir, bin string, log io.Writer) (*pgServer, error) {
	bin, err := findPGBin(bin)
	if err != nil {
		return nil, err
	}
	s := &pgServer{bin: bin, asUser: os.Geteuid() == 0}
	if s.asUser {
		// The tools run as the postgres user, who must reach the data
		// directory: a directory of its own under the system's
		// temporary directory (dir's parents may be private to root),
		// removed by stop.
		d, err := os.MkdirTemp("", "eddy-pg-")
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return nil, err
		}
		dir, s.tmp = d, d
	}
	s.data = filepath.Join(dir, "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if s.asUser {
		if out, err := exec.CommandContext(ctx, "chown", "-R", "postgres", dir).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("chown %s to postgres (initdb refuses to run as root): %v: %s", dir, err, out)
		}
	}
	if err := s.run(ctx, "initdb", "-D", s.data, "-U", "eddy", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync"); err != nil {
		return nil, err
	}
	port, err := miniotest.FreePort()
	if err != nil {
		return nil, err
	}
	conf := append([]string{"listen_addresses = '127.0.0.1'", fmt.Sprintf("port = %d", port), fmt.Sprintf("unix_socket_directories = '%s'", dir)}, pgConf...)
	f, err := os.OpenFile(filepath.Join(s.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, err = f.WriteString("\n# eddy-bench peers\n" + strings.Join(conf, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := s.run(ctx, "pg_ctl", "-D", s.data, "-l", filepath.Join(dir, "server.log"), "-w", "-t", "60", "start"); err != nil {
		return nil, err
	}
	s.dsn = fmt.Sprintf("postgres://eddy@127.0.0.1:%d/postgres?sslmode=disable", port)
	fmt.Fprintf(log, "peers: PostgreSQL (%s) at 127.0.0.1:%d\n", bin, port)
	return s, nil
}

func (s *pgServer) run(ctx context.Context, tool string, args ...string) error {
	path := filepath.Join(s.bin, tool)
	var cmd *exec.Cmd
	if s.asUser {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", tool, err, out)
	}
	return nil
}

func (s *pgServer) stop() {
	_ = s.run(context.Background(), "pg_ctl", "-D", s.data, "-m", "fast", "-w", "stop")
	if s.tmp != "" {
		os.RemoveAll(s.tmp)
	}
}

// pgPeer is PostgreSQL with one of two schemas.
type pgPeer struct {
	conn   *pgx.Conn
	expert bool
	names  *peerNames
	data   string // the server's data directory (its processes' CPU and memory)
	adds   [][]any
	dels   []*workload.Op
}

const (
	pgCopyBatch = 10_000 // links a COPY carries
	pgDelBatch  = 2_000  // revocations a DELETE carries
)

func openPGPeer(ctx context.Context, dsn string, expert bool, names *peerNames) (*pgPeer, error) {
	if dsn == "" {
		return nil, errors.New("no --pg-dsn")
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	p := &pgPeer{conn: conn, expert: expert, names: names}
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&p.data); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	ddl := []string{
		`DROP TABLE IF EXISTS backlinks`,
		`CREATE TABLE backlinks (
			id bigserial PRIMARY KEY,
			url text NOT NULL,
			source_uri text NOT NULL,
			author_did text NOT NULL,
			path text NOT NULL,
			created_at timestamptz,
			inserted_at timestamp(0) NOT NULL,
			updated_at timestamp(0) NOT NULL)`,
		`CREATE INDEX backlinks_url_index ON backlinks (url)`,
	}
	if expert {
		ddl = []string{
			`DROP TABLE IF EXISTS links`,
			`CREATE TABLE links (
				target bytea NOT NULL,
				src_did bigint NOT NULL,
				src_collection bigint NOT NULL,
				src_rkey bigint NOT NULL,
				path bigint NOT NULL,
				rev bigint NOT NULL,
				PRIMARY KEY (target, src_did, src_collection, src_rkey, path, rev)) WITH (fillfactor = 100)`,
		}
	}
	for _, q := range ddl {
		if _, err := conn.Exec(ctx, q); err != nil {
			conn.Close(ctx)
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	return p, nil
}

func (p *pgPeer) config() string {
	c := "PostgreSQL (" + strings.Join(pgConf, ", ") + "); "
	if p.expert {
		return c + "expert schema: links(target bytea, src_did, src_collection, src_rkey, path, rev bigint), one b-tree, the primary key (target, source, path, rev), fillfactor 100; COPY in batches of 10,000, deletes by the whole key, one DELETE a link pipelined in batches of 2,000 revocations; VACUUM after the deletes; bytes: pg_total_relation_size"
	}
	return c + "seed 002's schema: backlinks(id bigserial, url, source_uri, author_did, path text, created_at timestamptz, inserted_at, updated_at), a b-tree on url; COPY in batches of 10,000, deletes by (url, source_uri, path, created_at before the delete), one DELETE a link pipelined in batches of 2,000 revocations; ANALYZE at the end; bytes: pg_total_relation_size"
}

// stampTime is a stamp as a time (1 ms a stamp).
func stampTime(rev uint64) time.Time { return time.UnixMilli(int64(rev)).UTC() }

func (p *pgPeer) apply(op *workload.Op) error {
	ctx := context.Background()
	if op.Revoke {
		o := *op
		p.dels = append(p.dels, &o)
		if len(p.dels) >= pgDelBatch {
			return p.flush(ctx)
		}
		return nil
	}
	l := &op.Link
	if p.expert {
		t := l.Target.Bytes()
		p.adds = append(p.adds, []any{t[:], int64(l.Source.DID), int64(l.Source.Collection), int64(l.Source.RKey), int64(l.Location), int64(l.SourceRev)})
	} else {
		tl, err := p.names.link(l)
		if err != nil {
			return err
		}
		now := stampTime(l.SourceRev)
		p.adds = append(p.adds, []any{tl.target, tl.sourceURI(), tl.did, tl.path, now, now, now})
	}
	if len(p.adds) >= pgCopyBatch {
		return p.flush(ctx)
	}
	return nil
}

// flush copies the pending links, then applies the pending deletes:
// every link a delete names was written before it, so it is in the table
// by then, and links written after a delete are not matched by it (the
// whole key, with its rev; or created before the delete).
func (p *pgPeer) flush(ctx context.Context) error {
	if len(p.adds) > 0 {
		table, cols := "backlinks", []string{"url", "source_uri", "author_did", "path", "created_at", "inserted_at", "updated_at"}
		if p.expert {
			table, cols = "links", []string{"target", "src_did", "src_collection", "src_rkey", "path", "rev"}
		}
		if _, err := p.conn.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(p.adds)); err != nil {
			return fmt.Errorf("copy: %w", err)
		}
		p.adds = p.adds[:0]
	}
	if len(p.dels) == 0 {
		return nil
	}
	// One DELETE a link, pipelined in one batch: each finds its row
	// through the index (a DELETE ... USING unnest of thousands of keys
	// was planned as a join over the whole table).
	b := &pgx.Batch{}
	for _, op := range p.dels {
		for i := range op.Revoked {
			l := &op.Revoked[i]
			if p.expert {
				t := l.Target.Bytes()
				b.Queue(`DELETE FROM links WHERE target = $1 AND src_did = $2 AND src_collection = $3 AND src_rkey = $4 AND path = $5 AND rev = $6`,
					t[:], int64(l.Source.DID), int64(l.Source.Collection), int64(l.Source.RKey), int64(l.Location), int64(l.SourceRev))
				continue
			}
			tl, err := p.names.link(l)
			if err != nil {
				return err
			}
			b.Queue(`DELETE FROM backlinks WHERE url = $1 AND source_uri = $2 AND path = $3 AND created_at < $4`,
				tl.target, tl.sourceURI(), tl.path, stampTime(op.Revocation.Rev))
		}
	}
	err := p.conn.SendBatch(ctx, b).Close()
	if err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	p.dels = p.dels[:0]
	return nil
}

func (p *pgPeer) finish(ctx context.Context) error {
	if err := p.flush(ctx); err != nil {
		return err
	}
	q := "ANALYZE backlinks"
	if p.expert {
		q = "VACUUM (ANALYZE) links"
	}
	if _, err := p.conn.Exec(ctx, q); err != nil {
		return err
	}
	_, err := p.conn.Exec(ctx, "CHECKPOINT")
	return err
}

func (p *pgPeer) table() string {
	if p.expert {
		return "links"
	}
	return "backlinks"
}

func (p *pgPeer) size(ctx context.Context) (int64, string, error) {
	var n int64
	err := p.conn.QueryRow(ctx, "SELECT pg_total_relation_size($1)", p.table()).Scan(&n)
	return n, "pg_total_relation_size of the table (heap, indexes, TOAST, free-space and visibility maps; the WAL and the catalog left out)", err
}

// target is a target as the schema keys it.
func (p *pgPeer) target(t link.RecordID) (any, error) {
	if p.expert {
		b := t.Bytes()
		return b[:], nil
	}
	return p.names.target(t)
}

// page: the expert schema pages in its key's order from the cursor (the
// last row's key); seed 002's by id, as an Ecto app would.
func (p *pgPeer) page(ctx context.Context, target link.RecordID, after []byte, limit int) (int, []byte, error) {
	t, err := p.target(target)
	if err != nil {
		return 0, nil, err
	}
	var rows pgx.Rows
	switch {
	case p.expert && after == nil:
		rows, err = p.conn.Query(ctx, `SELECT src_did, src_collection, src_rkey, path, rev FROM links WHERE target = $1
			ORDER BY src_did, src_collection, src_rkey, path, rev LIMIT $2`, t, limit+1)
	case p.expert:
		var c [5]int64
		for i := range c {
			c[i] = int64(binary.BigEndian.Uint64(after[8*i:]))
		}
		rows, err = p.conn.Query(ctx, `SELECT src_did, src_collection, src_rkey, path, rev FROM links WHERE target = $1
			AND (src_did, src_collection, src_rkey, path, rev) > ($2, $3, $4, $5, $6)
			ORDER BY src_did, src_collection, src_rkey, path, rev LIMIT $7`, t, c[0], c[1], c[2], c[3], c[4], limit+1)
	case after == nil:
		rows, err = p.conn.Query(ctx, `SELECT id, source_uri, author_did, path, created_at FROM backlinks WHERE url = $1 ORDER BY id LIMIT $2`, t, limit+1)
	default:
		rows, err = p.conn.Query(ctx, `SELECT id, source_uri, author_did, path, created_at FROM backlinks WHERE url = $1 AND id > $2 ORDER BY id LIMIT $3`,
			t, int64(binary.BigEndian.Uint64(after)), limit+1)
	}
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	n := 0
	var last []byte
	for rows.Next() {
		if n == limit {
			n++
			break
		}
		n++
		if p.expert {
			var c [5]int64
			if err := rows.Scan(&c[0], &c[1], &c[2], &c[3], &c[4]); err != nil {
				return 0, nil, err
			}
			last = last[:0]
			for _, v := range c {
				last = binary.BigEndian.AppendUint64(last, uint64(v))
			}
		} else {
			var id int64
			var src, did, path string
			var at time.Time
			if err := rows.Scan(&id, &src, &did, &path, &at); err != nil {
				return 0, nil, err
			}
			last = binary.BigEndian.AppendUint64(last[:0], uint64(id))
		}
	}
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	if n > limit {
		return limit, last, nil
	}
	return n, nil, nil
}

func (p *pgPeer) count(ctx context.Context, target link.RecordID) (int, error) {
	t, err := p.target(target)
	if err != nil {
		return 0, err
	}
	col := "url"
	if p.expert {
		col = "target"
	}
	var n int64
	err = p.conn.QueryRow(ctx, "SELECT count(*) FROM "+p.table()+" WHERE "+col+" = $1", t).Scan(&n)
	return int(n), err
}

// serverPIDs returns the postmaster's PID and its children's.
func (p *pgPeer) serverPIDs() (int, []int) {
	b, err := os.ReadFile(filepath.Join(p.data, "postmaster.pid"))
	if err != nil {
		return 0, nil
	}
	pm, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return 0, nil
	}
	var kids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStat(pid); len(f) > 3 && f[3] == strconv.Itoa(pm) {
			kids = append(kids, pid)
		}
	}
	return pm, kids
}

// procStat returns the fields of /proc/pid/stat (the command's name,
// which may hold spaces, as one field).
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return append([]string{s[:strings.IndexByte(s, ' ')], s[strings.IndexByte(s, '(') : i+1]}, strings.Fields(s[i+1:])...)
}

const clockTicks = 100 // USER_HZ on Linux

// serverCPU is the server's CPU: the postmaster's own and its reaped
// children's, and its live children's.
func (p *pgPeer) serverCPU() time.Duration {
	pm, kids := p.serverPIDs()
	if pm == 0 {
		return 0
	}
	ticks := func(pid int, fields ...int) int64 {
		f := procStat(pid)
		var n int64
		for _, i := range fields {
			if i < len(f) {
				v, _ := strconv.ParseInt(f[i], 10, 64)
				n += v
			}
		}
		return n
	}
	t := ticks(pm, 13, 14, 15, 16) // utime, stime, cutime, cstime
	for _, k := range kids {
		t += ticks(k, 13, 14)
	}
	return time.Duration(t) * time.Second / clockTicks
}

// serverRSS is the proportional set size of the server's processes
// (shared buffers counted once).
func (p *pgPeer) serverRSS() int64 {
	pm, kids := p.serverPIDs()
	if pm == 0 {
		return 0
	}
	var total int64
	for _, pid := range append([]int{pm}, kids...) {
		f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				total += kb << 10
			}
		}
		f.Close()
	}
	return total
}

func (p *pgPeer) close() error { return p.conn.Close(context.Background()) }
