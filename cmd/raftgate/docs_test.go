package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestOperationsDocListsEveryServerFlag keeps the configuration reference
// in docs/operations.md in step with the server's flags.
func TestOperationsDocListsEveryServerFlag(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
	newServerFlags(fs)
	rows := map[string]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		if name, rest, ok := strings.Cut(line, "| `--"); ok && name == "" {
			flag, row, _ := strings.Cut(rest, "` |")
			rows[flag] = row
		}
	}
	fs.VisitAll(func(f *pflag.Flag) {
		row, ok := rows[f.Name]
		if !ok {
			t.Errorf("docs/operations.md has no row for --%s", f.Name)
			return
		}
		def := f.DefValue
		if def == "" || def == "[]" || def == "0s" {
			return
		}
		if def == "24h0m0s" {
			def = "24h"
		}
		if !strings.Contains(row, "`"+def+"`") {
			t.Errorf("docs/operations.md: --%s default is %q, the row says %q", f.Name, def, row)
		}
	})
}
