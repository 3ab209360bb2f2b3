//go:build !eddy_next

package fsm

// A default build knows no entry type beyond command.go's: see next.go for
// the one a build with -tags eddy_next adds.

func nextType(Type) (name string, payload any, ok bool) { return "", nil, false }

func leaderEntries(node, version string) ([]LeaderEntry, error) { return nil, nil }
