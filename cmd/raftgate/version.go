package main

import (
	"fmt"
	"io"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/raftgate/raftgate/ingress/admin"
)

// Set at link time for release builds, e.g.
//
//	go build -ldflags "-X main.version=v1.4.0 -X main.buildDate=2026-12-01T10:00:00Z" ./cmd/raftgate
//
// Unset, they come from the build info Go embeds (module version, VCS
// revision and commit time).
var (
	version   string
	commit    string
	buildDate string
)

// pseudoVersion matches the versions Go stamps on a build from a VCS work
// tree that is not exactly at a tag (v0.0.0-20261204162500-0123456789ab,
// +dirty when it had changes); the pattern is golang.org/x/mod/module's.
var pseudoVersion = regexp.MustCompile(`^v[0-9]+\.(0\.0-|\d+\.\d+-([^+]*\.)?0\.)\d{14}-[A-Za-z0-9]+(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// readBuildInfo says which build this binary is: ldflags first, then
// runtime/debug's build info. A build from a work tree (Go stamps it with
// a pseudo-version, or "(devel)") reports version "devel" and its commit (with "-dirty" when the tree had
// uncommitted changes); the build date is then the commit's time.
func readBuildInfo() admin.BuildInfo {
	info, _ := debug.ReadBuildInfo()
	return buildInfoFrom(info, admin.BuildInfo{Version: version, Commit: commit, BuildDate: buildDate, GoVersion: runtime.Version()})
}

// buildInfoFrom fills what b (the link-time values) leaves empty from info
// (nil: none embedded).
func buildInfoFrom(info *debug.BuildInfo, b admin.BuildInfo) admin.BuildInfo {
	if info != nil {
		if v := info.Main.Version; b.Version == "" && v != "(devel)" && !pseudoVersion.MatchString(v) && !strings.HasSuffix(v, "+dirty") {
			b.Version = info.Main.Version
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

// versionText is what `raftgate version` and `raftgate --version` print.
func versionText(b admin.BuildInfo) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "raftgate %s\n", b.Version)
	fmt.Fprintf(&sb, "commit:     %s\n", dash(b.Commit))
	fmt.Fprintf(&sb, "build date: %s\n", dash(b.BuildDate))
	fmt.Fprintf(&sb, "go:         %s\n", b.GoVersion)
	return sb.String()
}

func newVersionCmd(env cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version, commit, build date and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := io.WriteString(env.stdout, versionText(readBuildInfo()))
			return err
		},
	}
}

// registerBuildInfo exports raftgate_build_info{version,commit,build_date,go_version} = 1.
func registerBuildInfo(reg prometheus.Registerer, b admin.BuildInfo) error {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "raftgate", Name: "build_info",
		Help: "Always 1; the labels say which build this node runs.",
		ConstLabels: prometheus.Labels{
			"version": b.Version, "commit": b.Commit, "build_date": b.BuildDate, "go_version": b.GoVersion,
		},
	})
	g.Set(1)
	return reg.Register(g)
}
