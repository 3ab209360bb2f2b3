// Package version holds the build's version string, set at link time by the
// Makefile (-X github.com/eddy-backlinks/eddy/version.Version=...).
package version

// Version is the release or git description of this build.
var Version = "dev"
