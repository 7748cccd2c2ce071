package test

import (
	"context"
	"fmt"
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

	syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("dev did not stop within 20s of SIGTERM:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "curl") {
		t.Errorf("dev printed no curl commands to try:\n%s", out.String())
	}
}
