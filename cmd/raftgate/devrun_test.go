package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/server/servertest"
)

// TestDevHelpCommandsWorkAsPrinted runs `dev` with a real node and pastes
// every curl command of its help text, in order, into one shell: each must
// succeed, the attach (which uses the id the send printed) must answer the
// greeting, and the Counter object and Signup workflow must answer as the
// comments say. The raftgate commands name a program that exists after `go
// run` has ended.
func TestDevHelpCommandsWorkAsPrinted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	cfgs := devConfigs(1, t.TempDir(), devAddrs{ingress: freeAddr(t), admin: freeAddr(t), node: freeAddr(t), gossip: freeAddr(t)})
	cfgs[0].QuietRaft = true
	if err := cfgs[0].Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &testutil.LockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- runDev(ctx, out, zerolog.Nop(), cfgs, devHelp{cli: "go run ./cmd/raftgate", tempDir: true}, runServer)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runDev: %v", err)
		}
	})
	testutil.WaitFor(t, 30*time.Second, "the dev help text", func() bool { return strings.Contains(out.String(), "Ctrl-C stops the cluster") })

	var script []string
	for _, line := range strings.Split(out.String(), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.Contains(line, "<") || strings.Contains(line, ">"):
			t.Errorf("help line %q holds a shell redirection", line)
		case strings.HasPrefix(line, "curl ") || strings.HasPrefix(line, "ID="):
			// An HTTP error fails the line, and the script.
			script = append(script, strings.Replace(line, "curl -s ", "curl -sS --fail-with-body ", 1)+" || exit 1")
		case strings.Contains(line, " status --admin ") || strings.Contains(line, " services list --admin "):
			if !strings.HasPrefix(line, "go run ./cmd/raftgate ") {
				t.Errorf("help line %q: want it to start with go run ./cmd/raftgate", line)
			}
		}
	}
	if len(script) < 13 {
		t.Fatalf("found %d curl commands in the help text:\n%s", len(script), out.String())
	}
	sh := "set -u\n" + strings.Join(script, "\necho\n") + "\necho\n"
	cmd := exec.Command("sh", "-c", sh)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("pasted help commands failed: %v\nstdout:\n%s\nstderr:\n%s\nscript:\n%s", err, stdout.String(), stderr.String(), sh)
	}
	if n := strings.Count(stdout.String(), `"Hello, Ada!"`); n < 3 {
		t.Fatalf("want the greeting from the call, the attach and the keyed call, got %d:\n%s", n, stdout.String())
	}
	// The object's calls add up per key; the workflow's run answers its
	// attach, and its shared handler sees the run.
	for _, want := range []string{"5\n7\n7\n", `"Welcome, ada! A confirmation went to ada@example.com."`, `"signed up with ada@example.com"`} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("pasted help commands did not answer %q:\n%s", want, stdout.String())
		}
	}
}

func TestDevCLIName(t *testing.T) {
	for _, tc := range []struct{ arg0, exe, want string }{
		{"/tmp/go-build1234/b001/exe/raftgate", "/tmp/go-build1234/b001/exe/raftgate", "go run ./cmd/raftgate"},
		{"./raftgate", "/home/ada/raftgate/raftgate", "./raftgate"},
		{"raftgate", "/usr/local/bin/raftgate", "raftgate"},
	} {
		if got := devCLI(tc.arg0, filepath.FromSlash(tc.exe)); got != tc.want {
			t.Errorf("devCLI(%q, %q) = %q, want %q", tc.arg0, tc.exe, got, tc.want)
		}
	}
}

// TestDevLogsNoRaftChatterAtInfo: `dev` below --log-level debug drops the
// raft library's own messages, and a lone node stopping logs no failed
// leadership hand-off (it has nobody to hand over to).
func TestDevLogsNoRaftChatterAtInfo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node")
	}
	var quiet []bool
	stand := func(ctx context.Context, cfg ServerConfig, _ zerolog.Logger) error {
		quiet = append(quiet, cfg.QuietRaft)
		return context.Canceled
	}
	for _, level := range []string{"info", "debug"} {
		var stdout, stderr bytes.Buffer
		env := cliEnv{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, lookupEnv: func(string) (string, bool) { return "", false }}
		run(context.Background(), []string{"dev", "--log-level", level, "--admin-addr", "127.0.0.1:1"}, env, stand)
	}
	if len(quiet) != 2 || !quiet[0] || quiet[1] {
		t.Fatalf("QuietRaft at info, debug: %v; want true, false", quiet)
	}

	cfg := devConfigs(1, t.TempDir(), devAddrs{ingress: freeAddr(t), admin: freeAddr(t), node: freeAddr(t), gossip: freeAddr(t)})[0]
	cfg.QuietRaft = true
	cfg.LogFormat = "json"
	logs := &testutil.LockedBuffer{}
	logger, err := newLogger(logs, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = logger
	nd := servertest.Start(t, cfg.Config)
	if err := nd.Close(); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		for _, bad := range []string{"became leader", "newRaft", "MsgVoteResp", "switched to configuration", "leadership transfer incomplete", `\\n`} {
			if strings.Contains(line, bad) {
				t.Errorf("log line holds %q: %s", bad, line)
			}
		}
	}
	if !strings.Contains(logs.String(), "raftgate node started") {
		t.Fatalf("no start line in the log:\n%s", logs.String())
	}
}
