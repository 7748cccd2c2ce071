package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// readmeCommands returns the raftgate command lines of README.md's sh
// blocks, continuation lines joined and the blocks' variables (NAME=value
// lines) substituted, split into words as a shell would (single quotes).
func readmeCommands(t *testing.T) [][]string {
	t.Helper()
	doc, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var cmds [][]string
	vars := map[string]string{}
	inBlock := false
	var pending string
	for _, line := range strings.Split(string(doc), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inBlock = true
			continue
		case strings.HasPrefix(line, "```"):
			inBlock = false
			continue
		case !inBlock:
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			pending += cont
			continue
		}
		line, pending = pending+line, ""
		if code, _, ok := strings.Cut(line, " #"); ok {
			line = code
		}
		line = strings.TrimSpace(line)
		if name, value, ok := strings.Cut(line, "="); ok && !strings.ContainsAny(name, " -") && name != "" {
			vars[name] = value
			continue
		}
		for _, prefix := range []string{"./raftgate ", "go run ./cmd/raftgate "} {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				for name, value := range vars {
					rest = strings.ReplaceAll(rest, "$"+name, value)
				}
				cmds = append(cmds, shellWords(rest))
			}
		}
	}
	return cmds
}

// shellWords splits s at blanks, keeping single-quoted text whole.
func shellWords(s string) []string {
	var words []string
	var word strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	return words
}

// TestReadmeCommandsParse: every raftgate command in README.md names a
// subcommand, and its flags and arguments parse; the three-node section
// runs the example service it registers.
func TestReadmeCommandsParse(t *testing.T) {
	cmds := readmeCommands(t)
	if len(cmds) < 8 {
		t.Fatalf("found %d raftgate commands in README.md", len(cmds))
	}
	var echoAddr string
	registered := map[string]string{}
	for _, args := range cmds {
		root := newRootCmd(cliEnv{}, nil)
		cmd, rest, err := root.Find(args)
		if err != nil || cmd == root {
			t.Errorf("README: raftgate %s: not a subcommand (%v)", strings.Join(args, " "), err)
			continue
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("README: raftgate %s: %v", strings.Join(args, " "), err)
			continue
		}
		if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
			t.Errorf("README: raftgate %s: %v", strings.Join(args, " "), err)
		}
		switch cmd.Name() {
		case "echo":
			echoAddr = cmd.Flags().Lookup("addr").Value.String()
		case "add":
			if a := cmd.Flags().Args(); len(a) == 2 {
				registered[a[0]] = a[1]
			}
		case "server":
			// Each node listens where --initial-cluster and --join say.
			// A joining node (no id) is given its peers by the cluster.
			cfg, stderr, code := runCapture(t, args, nil)
			if code != 0 {
				t.Errorf("README: raftgate %s: exit %d: %s", strings.Join(args, " "), code, stderr)
			} else if cfg.NodeID != 0 && (cfg.InitialCluster[cfg.NodeID] != cfg.NodeAddr || !slices.Contains(cfg.Join, cfg.GossipAddr)) {
				t.Errorf("README: node %d listens at %s and %s, not where --initial-cluster %v and --join %v say",
					cfg.NodeID, cfg.NodeAddr, cfg.GossipAddr, cfg.InitialCluster, cfg.Join)
			}
		}
	}
	if echoAddr == "" || registered[echoServiceName] != "http://"+echoAddr {
		t.Fatalf("README registers Echo at %q, and runs raftgate echo at %q", registered[echoServiceName], echoAddr)
	}
}

// TestDocsNumberedListsCountUp: a numbered list in the docs counts 1, 2,
// 3, … (its items are cited by number), each list starting again at 1.
func TestDocsNumberedListsCountUp(t *testing.T) {
	paths, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range append(paths, "../../README.md") {
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		prev := 0
		for i, line := range strings.Split(string(doc), "\n") {
			num, _, ok := strings.Cut(line, ". ")
			n, err := strconv.Atoi(num)
			if !ok || err != nil {
				continue
			}
			if n != 1 && n != prev+1 {
				t.Errorf("%s:%d: item %d follows item %d", filepath.Base(path), i+1, n, prev)
			}
			prev = n
		}
	}
}
