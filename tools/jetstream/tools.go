//go:build tools

// Package tools pins the Jetstream v2 server (github.com/bluesky-social/jetstream,
// cmd/jetstream) that the end-to-end tests run against the simulated network.
// It is a module of its own so that the server's dependencies (OpenTelemetry,
// Pebble v1, the CLI) stay out of Eddy's module; scripts/build-jetstream.sh
// builds it into bin/jetstream.
package tools

import _ "github.com/bluesky-social/jetstream/cmd/jetstream"
