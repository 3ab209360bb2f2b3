package s3

import (
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestConfigFromURL(t *testing.T) {
	dir := t.TempDir()
	akFile, skFile, emptyFile := filepath.Join(dir, "ak"), filepath.Join(dir, "sk"), filepath.Join(dir, "empty")
	for p, v := range map[string]string{akFile: " file-ak\n", skFile: "file-sk\n", emptyFile: "\n"} {
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	eddyEnv := env(map[string]string{EnvAccessKey: "eddy-ak", EnvSecretKey: "eddy-sk", envAWSAccessKey: "aws-ak", envAWSSecretKey: "aws-sk"})
	awsEnv := env(map[string]string{envAWSAccessKey: "aws-ak", envAWSSecretKey: "aws-sk", envAWSSessionToken: "tok"})
	noEnv := env(nil)

	good := []struct {
		url  string
		env  func(string) string
		want Config
	}{
		{"s3://bkt", eddyEnv, Config{Bucket: "bkt", AccessKey: "eddy-ak", SecretKey: "eddy-sk"}},
		{"s3://bkt/a/b/?region=eu-west-1", awsEnv, Config{Bucket: "bkt", Prefix: "a/b", Region: "eu-west-1", AccessKey: "aws-ak", SecretKey: "aws-sk", SessionToken: "tok"}},
		{"s3://bkt/p?endpoint=127.0.0.1:9000&region=us-east-1&insecure=true", eddyEnv,
			Config{Bucket: "bkt", Prefix: "p", Endpoint: "127.0.0.1:9000", Region: "us-east-1", Insecure: true, PathStyle: true, AccessKey: "eddy-ak", SecretKey: "eddy-sk"}},
		{"s3://bkt?endpoint=s3.amazonaws.com&insecure=false", eddyEnv, Config{Bucket: "bkt", Endpoint: "s3.amazonaws.com", AccessKey: "eddy-ak", SecretKey: "eddy-sk"}},
		{"s3://bkt?access_key_file=" + url.QueryEscape(akFile) + "&secret_key_file=" + url.QueryEscape(skFile), eddyEnv,
			Config{Bucket: "bkt", AccessKey: "file-ak", SecretKey: "file-sk"}},
	}
	for _, c := range good {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ConfigFromURL(u, c.env)
		if err != nil {
			t.Errorf("ConfigFromURL(%s): %v", c.url, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ConfigFromURL(%s) =\n  %#v\nwant\n  %#v", c.url, got, c.want)
		}
	}

	bad := []struct {
		url, env, wantErr string
	}{
		{"s3://AKIA:SECRETVALUE@bkt/p", "eddy", "not accepted in the URL"},
		{"s3://AKIA@bkt/p", "eddy", "not accepted in the URL"},
		{"s3:///p", "eddy", "no bucket"},
		{"s3://bkt:9000/p", "eddy", "endpoint"},
		{"s3://bkt?secret_key=SECRETVALUE", "eddy", "unknown URL parameter"},
		{"s3://bkt?insecure=maybe", "eddy", "not a boolean"},
		{"s3://bkt?region=a&region=b", "eddy", "given 2 times"},
		{"s3://bkt?endpoint=http://127.0.0.1:9000", "eddy", "without scheme"},
		{"s3://bkt", "none", "no credentials"},
		{"s3://bkt", "half", "set both"},
		{"s3://bkt?access_key_file=" + url.QueryEscape(akFile), "eddy", "both access_key_file and secret_key_file"},
		{"s3://bkt?access_key_file=" + url.QueryEscape(akFile) + "&secret_key_file=" + url.QueryEscape(emptyFile), "eddy", "is empty"},
		{"s3://bkt?access_key_file=/no/such/file&secret_key_file=" + url.QueryEscape(skFile), "eddy", "no such file"},
		{"s3://bkt#frag", "eddy", "fragment"},
		{"gs://bkt", "eddy", "not s3"},
	}
	envs := map[string]func(string) string{
		"eddy": eddyEnv,
		"none": noEnv,
		"half": env(map[string]string{EnvAccessKey: "eddy-ak", envAWSAccessKey: "aws-ak", envAWSSecretKey: "aws-sk"}),
	}
	for _, c := range bad {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ConfigFromURL(u, envs[c.env])
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("ConfigFromURL(%s) error = %v, want one containing %q", c.url, err, c.wantErr)
			continue
		}
		if strings.Contains(err.Error(), "SECRETVALUE") {
			t.Errorf("ConfigFromURL(%s) error leaks a secret: %v", c.url, err)
		}
	}
}

func TestNewChecks(t *testing.T) {
	ok := Config{Bucket: "b", AccessKey: "a", SecretKey: "s"}
	if _, err := New(ok); err != nil {
		t.Fatalf("New(%v): %v", ok, err)
	}
	for name, mod := range map[string]func(*Config){
		"no bucket":      func(c *Config) { c.Bucket = "" },
		"no access key":  func(c *Config) { c.AccessKey = "" },
		"no secret key":  func(c *Config) { c.SecretKey = "" },
		"bad prefix":     func(c *Config) { c.Prefix = "a/../b" },
		"long prefix":    func(c *Config) { c.Prefix = strings.Repeat("p/", 300) },
		"dot prefix":     func(c *Config) { c.Prefix = ".hidden" },
		"control prefix": func(c *Config) { c.Prefix = "a\nb" },
	} {
		c := ok
		mod(&c)
		if _, err := New(c); err == nil {
			t.Errorf("New with %s succeeded", name)
		}
	}
	// Secrets do not show in the description.
	s, err := New(Config{Bucket: "b", Prefix: "p", AccessKey: "AKIAVISIBLE", SecretKey: "SECRETVALUE", SessionToken: "TOKENVALUE"})
	if err != nil {
		t.Fatal(err)
	}
	if d := s.String(); strings.Contains(d, "SECRETVALUE") || strings.Contains(d, "TOKENVALUE") || !strings.Contains(d, "s3://b/p") {
		t.Errorf("String() = %q", d)
	}
}
