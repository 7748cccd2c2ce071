package main

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/raftgate/raftgate/ingress/admin"
)

func TestBuildInfo(t *testing.T) {
	info := &debug.BuildInfo{
		Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abc"},
			{Key: "vcs.time", Value: "2026-12-01T09:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	got := buildInfoFrom(info, admin.BuildInfo{GoVersion: "go1.26"})
	want := admin.BuildInfo{Version: "devel", Commit: "0123abc-dirty", BuildDate: "2026-12-01T09:00:00Z", GoVersion: "go1.26"}
	if got != want {
		t.Fatalf("from VCS stamps: %+v, want %+v", got, want)
	}
	// A module version and link-time values win over the stamps.
	info.Main.Version = "v1.2.0"
	got = buildInfoFrom(info, admin.BuildInfo{Commit: "fedcba", BuildDate: "2026-12-02T00:00:00Z", GoVersion: "go1.26"})
	want = admin.BuildInfo{Version: "v1.2.0", Commit: "fedcba", BuildDate: "2026-12-02T00:00:00Z", GoVersion: "go1.26"}
	if got != want {
		t.Fatalf("with ldflags: %+v, want %+v", got, want)
	}
	// Go stamps a work tree's build with a pseudo-version: that is devel too.
	for _, v := range []string{"v0.0.0-20261204162500-0123456789ab", "v0.0.0-20261204162500-0123456789ab+dirty", "v1.2.1-0.20261204162500-0123456789ab", "v1.2.0+dirty"} {
		info.Main.Version = v
		if got := buildInfoFrom(info, admin.BuildInfo{}); got.Version != "devel" {
			t.Fatalf("module version %s: %+v, want devel", v, got)
		}
	}
	if got := buildInfoFrom(nil, admin.BuildInfo{GoVersion: "go1.26"}); got.Version != "devel" {
		t.Fatalf("without build info: %+v", got)
	}
}

func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		res := runCLI(t, "", args...)
		if res.code != 0 || !strings.HasPrefix(res.stdout, "raftgate ") || !strings.Contains(res.stdout, "\ngo:         go1.") ||
			!strings.Contains(res.stdout, "\ncommit:") || !strings.Contains(res.stdout, "\nbuild date:") {
			t.Fatalf("raftgate %v: exit %d, stdout %q", args, res.code, res.stdout)
		}
	}
}
