// Package buildinfo says which build of raftgate is running: the version,
// commit and build date set at link time for release builds, or else those
// Go embeds in the binary (module version, VCS revision and commit time).
// It is a leaf, so that the node (package server) and the command line
// read the same answer.
package buildinfo

import (
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at link time for release builds, e.g.
//
//	go build -ldflags "-X github.com/raftgate/raftgate/internal/buildinfo.version=v1.4.0 -X github.com/raftgate/raftgate/internal/buildinfo.buildDate=2026-12-01T10:00:00Z" ./cmd/raftgate
//
// Unset, they come from the build info Go embeds.
var (
	version   string
	commit    string
	buildDate string
)

// Info says which build a binary is.
type Info struct {
	Version string
	// Commit is the VCS revision, with "-dirty" when the tree had local
	// changes; empty when unknown.
	Commit string
	// BuildDate is RFC 3339; empty when unknown.
	BuildDate string
	GoVersion string
}

// Read says which build this binary is: ldflags first, then
// runtime/debug's build info. A build from a work tree (Go stamps it with
// a pseudo-version, or "(devel)") reports version "devel" and its commit (with "-dirty" when the tree had uncommitted
// changes); the build date is then the commit's time.
func Read() Info {
	info, _ := debug.ReadBuildInfo()
	return from(info, Info{Version: version, Commit: commit, BuildDate: buildDate, GoVersion: runtime.Version()})
}

// pseudoVersion matches the versions Go stamps on a build from a VCS work
// tree that is not exactly at a tag (v0.0.0-20261204162500-0123456789ab,
// +dirty when it had changes); the pattern is golang.org/x/mod/module's.
var pseudoVersion = regexp.MustCompile(`^v[0-9]+\.(0\.0-|\d+\.\d+-([^+]*\.)?0\.)\d{14}-[A-Za-z0-9]+(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// from fills what b (the link-time values) leaves empty from info (nil:
// none embedded).
func from(info *debug.BuildInfo, b Info) Info {
	if info != nil {
		// A work tree's build (a pseudo-version, or +dirty) is devel.
		if v := info.Main.Version; b.Version == "" && v != "(devel)" && !pseudoVersion.MatchString(v) && !strings.HasSuffix(v, "+dirty") {
			b.Version = v
		}
		var revision, modified, vcsTime string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value
			case "vcs.time":
				vcsTime = s.Value
			}
		}
		if b.Commit == "" && revision != "" {
			b.Commit = revision
			if modified == "true" {
				b.Commit += "-dirty"
			}
		}
		if b.BuildDate == "" {
			b.BuildDate = vcsTime
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	return b
}
