package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	info := &debug.BuildInfo{
		Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abc"},
			{Key: "vcs.time", Value: "2026-12-01T09:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	got := from(info, Info{GoVersion: "go1.26"})
	want := Info{Version: "devel", Commit: "0123abc-dirty", BuildDate: "2026-12-01T09:00:00Z", GoVersion: "go1.26"}
	if got != want {
		t.Fatalf("from VCS stamps: %+v, want %+v", got, want)
	}
	// A module version and link-time values win over the stamps.
	info.Main.Version = "v1.2.0"
	got = from(info, Info{Commit: "fedcba", BuildDate: "2026-12-02T00:00:00Z", GoVersion: "go1.26"})
	want = Info{Version: "v1.2.0", Commit: "fedcba", BuildDate: "2026-12-02T00:00:00Z", GoVersion: "go1.26"}
	if got != want {
		t.Fatalf("with ldflags: %+v, want %+v", got, want)
	}
	// Go stamps a work tree's build with a pseudo-version: that is devel too.
	for _, v := range []string{"v0.0.0-20261204162500-0123456789ab", "v0.0.0-20261204162500-0123456789ab+dirty", "v1.2.1-0.20261204162500-0123456789ab", "v1.2.0+dirty"} {
		info.Main.Version = v
		if got := from(info, Info{}); got.Version != "devel" {
			t.Fatalf("module version %s: %+v, want devel", v, got)
		}
	}
	if got := from(nil, Info{GoVersion: "go1.26"}); got.Version != "devel" {
		t.Fatalf("without build info: %+v", got)
	}
}
