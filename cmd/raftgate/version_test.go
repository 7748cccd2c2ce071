package main

import (
	"strings"
	"testing"
)

func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		res := runCLI(t, "", args...)
		if res.code != 0 || !strings.HasPrefix(res.stdout, "raftgate ") || !strings.Contains(res.stdout, "\ngo:         go1.") ||
			!strings.Contains(res.stdout, "\ncommit:") || !strings.Contains(res.stdout, "\nbuild date:") {
			t.Fatalf("raftgate %v: exit %d, stdout %q", args, res.code, res.stdout)
		}
	}
}
