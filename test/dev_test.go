package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// TestDevAnswersGreeter runs `raftgate dev` as a user would and checks that
// the example Greeter answers through the ingress within seconds, and that
// the process stops cleanly on SIGTERM.
func TestDevAnswersGreeter(t *testing.T) {
	ingress := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(binary, "dev",
		"--data-dir", t.TempDir(),
		"--ingress-addr", ingress,
		"--admin-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--node-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--gossip-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
	)
	var out testutil.LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})

	var body string
	testutil.WaitFor(t, 30*time.Second, "Greeter answering through dev's ingress", func() bool {
		select {
		case <-exited:
			t.Fatalf("dev exited: %v\n%s", waitErr, out.String())
		default:
		}
		r, err := do(context.Background(), http.MethodPost, "http://"+ingress+"/Greeter/greet", []byte(`"Ada"`), nil)
		if err != nil || r.status != http.StatusOK {
			return false
		}
		body = string(r.body)
		return true
	})
	if body != `"Hello, Ada!"` {
		t.Fatalf("Greeter answered %s, want \"Hello, Ada!\"", body)
	}

	// The commands to try come once every example service is registered,
	// which may be after Greeter answers.
	testutil.WaitFor(t, 30*time.Second, "dev to print curl commands to try", func() bool {
		return strings.Contains(out.String(), "curl")
	})
	syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("dev did not stop within 20s of SIGTERM:\n%s", out.String())
	}
}

// TestEchoHelpCommandsWorkAsPrinted runs `raftgate echo` next to a node and
// pastes the commands it prints, in order, into one shell: each must
// succeed, and the services must
// answer as registered, Counter as an object and Signup as a workflow.
func TestEchoHelpCommandsWorkAsPrinted(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	c := startCluster(t, clusterOpts{nodes: 1})
	n := c.nodes[0]
	echoAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, binary, "echo", "--addr", echoAddr, "--ingress", n.ingressURL(), "--admin", n.adminURL())
	var out testutil.LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	testutil.WaitFor(t, 10*time.Second, "echo's help text", func() bool { return strings.Contains(out.String(), "Ctrl-C stops it") })

	var script []string
	for _, line := range strings.Split(out.String(), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "curl -s "):
			script = append(script, strings.Replace(line, "curl -s ", "curl -sS --fail-with-body ", 1)+" || exit 1")
		case strings.HasPrefix(line, binary+" "): // how echo was started
			script = append(script, line+" || exit 1")
		}
	}
	if len(script) < 8 {
		t.Fatalf("found %d commands in echo's help text:\n%s", len(script), out.String())
	}
	sh := "set -u\n" + strings.Join(script, "\necho\n") + "\necho\n"
	run := exec.Command("sh", "-c", sh)
	var stdout, stderr strings.Builder
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("pasted echo commands failed: %v\nstdout:\n%s\nstderr:\n%s\nscript:\n%s", err, stdout.String(), stderr.String(), sh)
	}
	for _, want := range []string{`"hi"`, "\n5\n5\n", `"Welcome, ada! A confirmation went to ada@example.com."`} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("pasted echo commands did not answer %q:\n%s", want, stdout.String())
		}
	}
}
