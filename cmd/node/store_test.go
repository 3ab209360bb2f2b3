package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eddy-backlinks/eddy/objstore/miniotest"
	"github.com/eddy-backlinks/eddy/objstore/s3"
)

// TestOpenStoreCountsAttempts: the store a node opens on a real S3 bucket
// counts its calls and, beneath them, each HTTP request its client sends.
func TestOpenStoreCountsAttempts(t *testing.T) {
	endpoint, access, secret := miniotest.StartMinIO(t)
	t.Setenv("EDDY_S3_ACCESS_KEY", access)
	t.Setenv("EDDY_S3_SECRET_KEY", secret)
	reg := prometheus.NewRegistry()
	url := fmt.Sprintf("s3://%s/%s?endpoint=%s&insecure=true&region=us-east-1", miniotest.Bucket, t.Name(), endpoint)
	store, err := openStore(url, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := store.Put(ctx, "a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, "missing"); err == nil {
		t.Fatal("a missing object read")
	}
	for _, c := range []struct {
		name, method, result string
		want                 float64
	}{
		{"eddy_objstore_requests_total", "", "", 2},
		{"eddy_objstore_http_attempts_total", "PUT", s3.AttemptOK, 1},
		{"eddy_objstore_http_attempts_total", "GET", s3.AttemptClientError, 1},
	} {
		var got float64
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != c.name {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if c.method == "" || labels["method"] == c.method && labels["result"] == c.result {
					got += m.GetCounter().GetValue()
				}
			}
		}
		if got < c.want {
			t.Errorf("%s{%s,%s} = %v, want at least %v", c.name, c.method, c.result, got, c.want)
		}
	}
}
