package s3

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// Environment variables holding credentials; see ConfigFromURL.
const (
	EnvAccessKey = "EDDY_S3_ACCESS_KEY"
	EnvSecretKey = "EDDY_S3_SECRET_KEY"

	envAWSAccessKey    = "AWS_ACCESS_KEY_ID"
	envAWSSecretKey    = "AWS_SECRET_ACCESS_KEY"
	envAWSSessionToken = "AWS_SESSION_TOKEN"
)

// ConfigFromURL makes a Config from an s3://bucket/prefix URL. Its query
// parameters are:
//
//	endpoint=host:port    server address (default: AWS, s3.amazonaws.com);
//	                      any other endpoint is addressed path-style
//	region=us-east-1      bucket region
//	insecure=true         plain HTTP instead of HTTPS
//	access_key_file=PATH  file holding the access key
//	secret_key_file=PATH  file holding the secret key
//
// Any other parameter is an error. Credentials never come from the URL
// itself: a URL with user info is refused. Without the *_file parameters
// they come from getenv (os.Getenv if nil): EDDY_S3_ACCESS_KEY and
// EDDY_S3_SECRET_KEY if either is set, else AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN. Errors never echo secrets.
func ConfigFromURL(u *url.URL, getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var cfg Config
	if u.Scheme != "s3" {
		return cfg, fmt.Errorf("s3: URL scheme is %q, not s3", u.Scheme)
	}
	if u.User != nil {
		return cfg, errors.New("s3: credentials are not accepted in the URL")
	}
	if u.Host == "" {
		return cfg, errors.New("s3: URL has no bucket (s3://bucket/prefix)")
	}
	if u.Port() != "" {
		return cfg, errors.New("s3: URL host is the bucket name; give the server as ?endpoint=host:port")
	}
	if u.Fragment != "" {
		return cfg, errors.New("s3: URL has a fragment")
	}
	cfg.Bucket = u.Host
	cfg.Prefix = strings.Trim(u.Path, "/")

	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return cfg, fmt.Errorf("s3: URL query: %w", err)
	}
	var accessFile, secretFile string
	for name, vals := range q {
		if len(vals) != 1 {
			return cfg, fmt.Errorf("s3: URL parameter %q given %d times", name, len(vals))
		}
		v := vals[0]
		switch name {
		case "endpoint":
			cfg.Endpoint = v
		case "region":
			cfg.Region = v
		case "insecure":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return cfg, fmt.Errorf("s3: URL parameter insecure=%q is not a boolean", v)
			}
			cfg.Insecure = b
		case "access_key_file":
			accessFile = v
		case "secret_key_file":
			secretFile = v
		default:
			return cfg, fmt.Errorf("s3: unknown URL parameter %q (known: endpoint, region, insecure, access_key_file, secret_key_file)", name)
		}
	}
	if strings.Contains(cfg.Endpoint, "/") {
		return cfg, errors.New("s3: endpoint must be host[:port], without scheme or path (use insecure=true for http)")
	}
	cfg.PathStyle = cfg.Endpoint != "" && cfg.Endpoint != DefaultEndpoint

	if (accessFile == "") != (secretFile == "") {
		return cfg, errors.New("s3: give both access_key_file and secret_key_file, or neither")
	}
	switch {
	case accessFile != "":
		if cfg.AccessKey, err = readKeyFile("access_key_file", accessFile); err != nil {
			return cfg, err
		}
		if cfg.SecretKey, err = readKeyFile("secret_key_file", secretFile); err != nil {
			return cfg, err
		}
	case getenv(EnvAccessKey) != "" || getenv(EnvSecretKey) != "":
		cfg.AccessKey, cfg.SecretKey = getenv(EnvAccessKey), getenv(EnvSecretKey)
		if cfg.AccessKey == "" || cfg.SecretKey == "" {
			return cfg, fmt.Errorf("s3: set both %s and %s, or neither", EnvAccessKey, EnvSecretKey)
		}
	default:
		cfg.AccessKey, cfg.SecretKey = getenv(envAWSAccessKey), getenv(envAWSSecretKey)
		cfg.SessionToken = getenv(envAWSSessionToken)
		if cfg.AccessKey == "" || cfg.SecretKey == "" {
			return cfg, fmt.Errorf("s3: no credentials: set %s and %s (or %s and %s), or give access_key_file and secret_key_file",
				EnvAccessKey, EnvSecretKey, envAWSAccessKey, envAWSSecretKey)
		}
	}
	return cfg, nil
}

func readKeyFile(param, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("s3: %s: %w", param, err)
	}
	k := strings.TrimSpace(string(b))
	if k == "" {
		return "", fmt.Errorf("s3: %s: %s is empty", param, path)
	}
	return k, nil
}
