//go:build eddy_next

package fsm

// A build with -tags eddy_next is "version N+1" of the rolling-upgrade test
// (e2e/roll_test.go): the same code plus one Raft entry type that a default
// build does not know. Each time one of its nodes becomes leader it
// proposes a BuildInfo entry flagged FlagSkippable; a default build's FSM
// applies it as a no-op and counts it (skipped_entries in /admin/status),
// this build decodes it and applies it as a no-op. It changes nothing a
// default build reads, which is what the flag promises.

// TypeBuildInfo records which build a new leader runs.
const TypeBuildInfo = typeEnd

// BuildInfo is the payload of TypeBuildInfo.
type BuildInfo struct {
	Node    string `json:"node"`
	Version string `json:"version"`
}

func nextType(t Type) (name string, payload any, ok bool) {
	if t == TypeBuildInfo {
		return "build-info", &BuildInfo{}, true
	}
	return "", nil, false
}

func leaderEntries(node, version string) ([]LeaderEntry, error) {
	b, err := Encode(TypeBuildInfo, FlagSkippable, BuildInfo{Node: node, Version: version})
	if err != nil {
		return nil, err
	}
	return []LeaderEntry{{Type: TypeBuildInfo, Flags: FlagSkippable, Data: b}}, nil
}
