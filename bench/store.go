package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/eddy-backlinks/eddy/objstore/miniotest"
	"github.com/eddy-backlinks/eddy/objstore/s3"
)

// openStore returns the run's store, its name, and a function that
// releases it (and deletes what the run wrote to a URL store).
func (b *bench) openStore(ctx context.Context, tmp string) (objstore.Store, string, func(), error) {
	switch b.cfg.Store {
	case "file":
		s, err := local.New(filepath.Join(tmp, "store"))
		if err != nil {
			return nil, "", nil, err
		}
		return s, "file", func() {}, nil
	case "s3":
		dir := filepath.Join(tmp, "minio")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, "", nil, err
		}
		srv, err := miniotest.Start(ctx, dir)
		if err != nil {
			return nil, "", nil, fmt.Errorf("--store s3 runs a local MinIO server: %w", err)
		}
		s, err := s3.New(s3.Config{
			Endpoint: srv.Endpoint(), Region: "us-east-1", Bucket: miniotest.Bucket, Prefix: "bench",
			Insecure: true, PathStyle: true, AccessKey: miniotest.AccessKey, SecretKey: miniotest.SecretKey,
		})
		if err != nil {
			srv.Stop()
			return nil, "", nil, err
		}
		b.logf("MinIO at %s", srv.Endpoint())
		return s, "s3 (local MinIO)", func() { s.Close(); srv.Stop() }, nil
	default:
		inner, err := objstore.Open(b.cfg.Store)
		if err != nil {
			return nil, "", nil, err
		}
		var r [6]byte
		_, _ = rand.Read(r[:])
		prefix := "eddy-bench-" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(r[:]) + "/"
		s := &prefixStore{inner: inner, prefix: prefix}
		name := fmt.Sprint(inner)
		b.logf("store %s, prefix %s", name, prefix)
		return s, name, func() {
			if !b.cfg.Keep {
				var keys []string
				_ = s.List(context.Background(), "", func(k string, _ int64) error { keys = append(keys, k); return nil })
				for _, k := range keys {
					_ = s.Delete(context.Background(), k)
				}
			}
			if c, ok := inner.(io.Closer); ok {
				c.Close()
			}
		}, nil
	}
}

// prefixStore puts every key of a Store under a prefix.
type prefixStore struct {
	inner  objstore.Store
	prefix string
}

func (p *prefixStore) Put(ctx context.Context, key string, data []byte) error {
	return p.inner.Put(ctx, p.prefix+key, data)
}

func (p *prefixStore) Get(ctx context.Context, key string) ([]byte, error) {
	return p.inner.Get(ctx, p.prefix+key)
}

func (p *prefixStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	return p.inner.GetRange(ctx, p.prefix+key, off, n)
}

func (p *prefixStore) Size(ctx context.Context, key string) (int64, error) {
	return p.inner.Size(ctx, p.prefix+key)
}

func (p *prefixStore) Delete(ctx context.Context, key string) error {
	return p.inner.Delete(ctx, p.prefix+key)
}

func (p *prefixStore) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	return p.inner.List(ctx, p.prefix+prefix, func(k string, n int64) error {
		return fn(strings.TrimPrefix(k, p.prefix), n)
	})
}
