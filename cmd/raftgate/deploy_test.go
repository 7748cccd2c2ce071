package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/ingress"
)

// readEnvFile reads a systemd EnvironmentFile of KEY=VALUE lines.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not KEY=VALUE", path, line)
		}
		env[k] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return env
}

// unitValue returns the value of key in a systemd unit (last one wins).
func unitValue(t *testing.T, unit, key string) string {
	t.Helper()
	value := ""
	for _, line := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			value = v
		}
	}
	if value == "" {
		t.Fatalf("deploy/raftgate.service has no %s", key)
	}
	return value
}

// TestDeployExample runs deploy/'s systemd command line, with deploy's
// config file and node environment, through the real command line and
// config loader, so that the shipped example cannot rot: its keys exist,
// its values parse and validate, and it describes node 1 of a three-node
// cluster. The token file loads too.
func TestDeployExample(t *testing.T) {
	unitBytes, err := os.ReadFile("../../deploy/raftgate.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(unitBytes)
	exec := strings.Fields(unitValue(t, unit, "ExecStart"))
	if exec[0] != "/usr/local/bin/raftgate" || len(exec) < 2 {
		t.Fatalf("ExecStart = %v", exec)
	}
	args := exec[1:]
	for i, a := range args {
		if a == "/etc/raftgate/raftgate.toml" {
			args[i] = "../../deploy/raftgate.toml"
		}
	}
	if unitValue(t, unit, "EnvironmentFile") != "/etc/raftgate/node.env" {
		t.Fatal("the unit's EnvironmentFile is not /etc/raftgate/node.env, which the docs and raftgate.env name")
	}
	env := readEnvFile(t, "../../deploy/raftgate.env")

	var got ServerConfig
	runNode := func(_ context.Context, cfg ServerConfig, _ zerolog.Logger) error {
		got = cfg
		return nil
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, cliEnv{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr,
		lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}, runNode)
	if code != 0 {
		t.Fatalf("raftgate %v with deploy/raftgate.env: exit %d\n%s", args, code, stderr.String())
	}
	if got.NodeID != 1 || len(got.InitialCluster) != 3 || len(got.Join) != 3 || got.DataDir != "/var/lib/raftgate" ||
		got.NodeAddr != got.InitialCluster[1] || got.IngressTokens != "/etc/raftgate/tokens.toml" ||
		got.TLSCA == "" || got.IngressTLSCert == "" || len(got.GossipKey) != 32 || got.AdminToken == "" {
		t.Fatalf("deploy example loaded as %+v", got)
	}
	// systemd must wait for the graceful shutdown before it kills.
	stop, err := time.ParseDuration(unitValue(t, unit, "TimeoutStopSec") + "s")
	if err != nil || stop <= got.ShutdownGrace {
		t.Fatalf("TimeoutStopSec %v must exceed shutdown-grace %v", stop, got.ShutdownGrace)
	}
	if !strings.Contains(unit, "ExecReload=/bin/kill -HUP $MAINPID") {
		t.Fatal("the unit does not reload the token file on systemctl reload")
	}
	tokens, err := ingress.LoadTokens("../../deploy/tokens.toml")
	if err != nil {
		t.Fatal(err)
	}
	if names := strings.Join(tokens.Names(), ","); names != "checkout-web,operations" {
		t.Fatalf("deploy/tokens.toml names %s", names)
	}
}
