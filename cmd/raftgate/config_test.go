package main

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/server"
)

// runCapture runs the command line with env vars from vars and returns the
// ServerConfig the server command would have run with.
func runCapture(t *testing.T, args []string, vars map[string]string) (ServerConfig, string, int) {
	t.Helper()
	var got ServerConfig
	var stderr bytes.Buffer
	env := cliEnv{
		stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &stderr,
		lookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok },
		environ: func() []string {
			var kv []string
			for k, v := range vars {
				kv = append(kv, k+"="+v)
			}
			return kv
		},
	}
	capture := func(ctx context.Context, cfg ServerConfig, logger zerolog.Logger) error {
		got = cfg
		return nil
	}
	code := run(context.Background(), args, env, capture)
	return got, stderr.String(), code
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestServerDefaults(t *testing.T) {
	cfg, stderr, code := runCapture(t, []string{"server", "--data-dir", "/d"}, nil)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := DefaultServerConfig()
	want.DataDir = "/d"
	if !equalConfig(cfg, want) {
		t.Fatalf("got  %+v\nwant %+v", cfg, want)
	}
}

func equalConfig(a, b ServerConfig) bool {
	if !maps.Equal(a.InitialCluster, b.InitialCluster) || !slices.Equal(a.Join, b.Join) || !bytes.Equal(a.GossipKey, b.GossipKey) {
		return false
	}
	a.InitialCluster, b.InitialCluster, a.Join, b.Join, a.GossipKey, b.GossipKey = nil, nil, nil, nil, nil, nil
	return a.NodeID == b.NodeID && a.DataDir == b.DataDir && a.IngressAddr == b.IngressAddr && a.AdminAddr == b.AdminAddr &&
		a.NodeAddr == b.NodeAddr && a.GossipAddr == b.GossipAddr && a.AdvertiseGossipAddr == b.AdvertiseGossipAddr &&
		a.Partitions == b.Partitions && a.Retention == b.Retention && a.ShutdownGrace == b.ShutdownGrace && a.DrainDelay == b.DrainDelay &&
		a.RequestTimeout == b.RequestTimeout && a.MaxConcurrent == b.MaxConcurrent && a.MaxBodyBytes == b.MaxBodyBytes &&
		a.BodyReadTimeout == b.BodyReadTimeout && a.Placement == b.Placement &&
		a.TLSCert == b.TLSCert && a.TLSKey == b.TLSKey && a.TLSCA == b.TLSCA && a.AdminToken == b.AdminToken &&
		a.Pprof == b.Pprof && a.LogFormat == b.LogFormat && a.LogLevel == b.LogLevel
}

// TestPrecedence: flag > env > file > default, key by key.
func TestPrecedence(t *testing.T) {
	for _, file := range []struct{ name, content string }{
		{"node.toml", `
node-id = 3
data_dir = "/from-file"
initial-cluster = "1=10.0.0.1:5122,2=10.0.0.2:5122,3=10.0.0.3:5122"
join = ["10.0.0.1:7946", "10.0.0.2:7946"]
partitions = 8
retention = "1h"
max-concurrent = 7
pprof = true
log-level = "debug"
`},
		{"node.yaml", `
node-id: 3
data_dir: /from-file
initial-cluster: {1: "10.0.0.1:5122", 2: "10.0.0.2:5122", 3: "10.0.0.3:5122"}
join: [10.0.0.1:7946, 10.0.0.2:7946]
partitions: 8
retention: 1h
max-concurrent: 7
pprof: true
log-level: debug
`},
	} {
		t.Run(file.name, func(t *testing.T) {
			path := writeFile(t, file.name, file.content)
			env := map[string]string{
				"RAFTGATE_PARTITIONS":     "16",   // env beats file
				"RAFTGATE_RETENTION":      "3h",   // flag beats env
				"RAFTGATE_ADMIN_TOKEN":    "tok",  // env beats default
				"RAFTGATE_CONFIG":         path,   // the file itself from env
				"RAFTGATE_MAX_BODY_BYTES": "1024", // env beats default
			}
			cfg, stderr, code := runCapture(t, []string{"server", "--retention", "2h", "--max-concurrent", "9"}, env)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			want := DefaultServerConfig()
			want.NodeID = 3
			want.DataDir = "/from-file"
			want.InitialCluster = map[uint64]string{1: "10.0.0.1:5122", 2: "10.0.0.2:5122", 3: "10.0.0.3:5122"}
			want.Join = []string{"10.0.0.1:7946", "10.0.0.2:7946"}
			want.Partitions = 16
			want.Retention = 2 * time.Hour
			want.MaxConcurrent = 9
			want.Pprof = true
			want.LogLevel = "debug"
			want.AdminToken = "tok"
			want.MaxBodyBytes = 1024
			if !equalConfig(cfg, want) {
				t.Fatalf("got  %+v\nwant %+v", cfg, want)
			}
		})
	}
}

// TestPlacementFlag: --placement defaults to local, reads from the flag and
// from RAFTGATE_PLACEMENT, and refuses other values by name.
func TestPlacementFlag(t *testing.T) {
	dir := t.TempDir()
	if cfg, stderr, code := runCapture(t, []string{"server", "--data-dir", dir}, nil); code != 0 || cfg.Placement != server.PlacementLocal {
		t.Fatalf("default: placement %q, exit %d: %s", cfg.Placement, code, stderr)
	}
	if cfg, stderr, code := runCapture(t, []string{"server", "--data-dir", dir, "--placement", "spread"}, nil); code != 0 || cfg.Placement != server.PlacementSpread {
		t.Fatalf("--placement spread: placement %q, exit %d: %s", cfg.Placement, code, stderr)
	}
	env := map[string]string{"RAFTGATE_PLACEMENT": "spread"}
	if cfg, stderr, code := runCapture(t, []string{"server", "--data-dir", dir}, env); code != 0 || cfg.Placement != server.PlacementSpread {
		t.Fatalf("RAFTGATE_PLACEMENT=spread: placement %q, exit %d: %s", cfg.Placement, code, stderr)
	}
	_, stderr, code := runCapture(t, []string{"server", "--data-dir", dir, "--placement", "nearest"}, nil)
	if code == 0 || !strings.Contains(stderr, `--placement: "nearest" is not local or spread`) {
		t.Fatalf("--placement nearest: exit %d: %s", code, stderr)
	}
}

func TestSourceErrorsNameTheirOrigin(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad flag", []string{"server", "--data-dir", "/d", "--partitions", "x"}, nil, `"--partitions"`},
		{"bad env", []string{"server", "--data-dir", "/d"}, map[string]string{"RAFTGATE_NODE_ID": "one"}, `RAFTGATE_NODE_ID="one"`},
		{"unknown key", []string{"server", "--config", writeFile(t, "c.toml", "nodeid = 1\n")}, nil, `unknown key "nodeid"`},
		{"bad file value", []string{"server", "--config", writeFile(t, "c.yml", "retention: soon\n")}, nil, "c.yml: retention"},
		{"bad extension", []string{"server", "--config", writeFile(t, "c.json", "{}")}, nil, "want a .toml, .yaml or .yml file"},
		{"missing file", []string{"server", "--config", "/nonexistent.toml"}, nil, "config file"},
		{"gossip key", []string{"server", "--data-dir", "/d", "--gossip-key", "!!"}, nil, "--gossip-key: not base64"},
		{"initial cluster", []string{"server", "--data-dir", "/d", "--initial-cluster", "1:127.0.0.1:1"}, nil, "--initial-cluster"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := runCapture(t, c.args, c.env)
			if code == 0 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want it to mention %s", code, stderr, c.want)
			}
		})
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	valid := DefaultServerConfig()
	valid.DataDir = "/d"
	if err := valid.Validate(); err != nil {
		t.Fatalf("default config with data dir: %v", err)
	}
	cases := []struct {
		mutate func(*ServerConfig)
		want   string
	}{
		{func(c *ServerConfig) { c.NodeID = 0 }, "--node-id: must be at least 1"},
		{func(c *ServerConfig) { c.NodeID = 2 }, "--node-id: 2 must be in --initial-cluster (1=127.0.0.1:5122)"},
		{func(c *ServerConfig) { c.DataDir = " " }, "--data-dir: required"},
		{func(c *ServerConfig) { c.IngressAddr = "8080" }, "--ingress-addr:"},
		{func(c *ServerConfig) { c.AdminAddr = ":9070" }, "--admin-addr:"},
		{func(c *ServerConfig) { c.NodeAddr = "h:0" }, "--node-addr:"},
		{func(c *ServerConfig) { c.GossipAddr = "h:99999" }, "--gossip-addr:"},
		{func(c *ServerConfig) { c.AdvertiseGossipAddr = "h" }, "--advertise-gossip-addr:"},
		{func(c *ServerConfig) { c.InitialCluster = nil }, "--initial-cluster: required"},
		{func(c *ServerConfig) { c.InitialCluster = map[uint64]string{1: "a:1", 2: "a:1"} }, "--initial-cluster: nodes 1 and 2 have the same address"},
		{func(c *ServerConfig) { c.InitialCluster = map[uint64]string{1: "bad"} }, "--initial-cluster: node 1:"},
		{func(c *ServerConfig) { c.Join = []string{"nope"} }, "--join:"},
		{func(c *ServerConfig) { c.Partitions = 0 }, "--partitions:"},
		{func(c *ServerConfig) { c.Partitions = 100000 }, "--partitions:"},
		{func(c *ServerConfig) { c.Retention = 0 }, "--retention:"},
		{func(c *ServerConfig) { c.ShutdownGrace = -1 }, "--shutdown-grace:"},
		{func(c *ServerConfig) { c.DrainDelay = -1 }, "--drain-delay:"},
		{func(c *ServerConfig) { c.DrainDelay = c.ShutdownGrace/2 + 1 }, "--drain-delay:"},
		{func(c *ServerConfig) { c.RequestTimeout = 0 }, "--request-timeout:"},
		{func(c *ServerConfig) { c.MaxConcurrent = 0 }, "--max-concurrent:"},
		{func(c *ServerConfig) { c.Placement = "nearest" }, `--placement: "nearest" is not local or spread`},
		{func(c *ServerConfig) { c.MaxBodyBytes = 0 }, "--max-body-bytes:"},
		{func(c *ServerConfig) { c.BodyReadTimeout = 0 }, "--body-read-timeout:"},
		{func(c *ServerConfig) { c.TLSCert = "c.pem" }, "--tls-cert: --tls-cert and --tls-key go together"},
		{func(c *ServerConfig) { c.TLSCA = "ca.pem" }, "--tls-ca:"},
		{func(c *ServerConfig) { c.GossipKey = []byte("short") }, "--gossip-key: decodes to 5 bytes"},
		{func(c *ServerConfig) { c.LogFormat = "xml" }, "--log-format:"},
		{func(c *ServerConfig) { c.LogLevel = "loud" }, "--log-level:"},
	}
	for _, c := range cases {
		cfg := valid
		cfg.InitialCluster = maps.Clone(valid.InitialCluster)
		c.mutate(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, server.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an server.ErrInvalidConfig containing %q", err, c.want)
		}
	}
}

func TestParseInitialCluster(t *testing.T) {
	got, err := parseInitialCluster(" 1=127.0.0.1:5122, 2=127.0.0.1:5222,3=127.0.0.1:5322,")
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]string{1: "127.0.0.1:5122", 2: "127.0.0.1:5222", 3: "127.0.0.1:5322"}
	if !maps.Equal(got, want) {
		t.Fatalf("got %v", got)
	}
	if s := server.FormatInitialCluster(got); s != "1=127.0.0.1:5122,2=127.0.0.1:5222,3=127.0.0.1:5322" {
		t.Fatalf("format %q", s)
	}
	for _, bad := range []string{"1", "0=a:1", "x=a:1", "1=a:1,1=b:1"} {
		if _, err := parseInitialCluster(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestServerPassesTheContextAndLogger(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stderr bytes.Buffer
	env := cliEnv{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &stderr, lookupEnv: func(string) (string, bool) { return "", false }}
	code := run(ctx, []string{"server", "--data-dir", "/d", "--log-format", "console"}, env, func(ctx context.Context, cfg ServerConfig, logger zerolog.Logger) error {
		if ctx.Err() == nil {
			return errors.New("context not passed through")
		}
		logger.Info().Msg("from runner")
		return nil
	})
	if code != 0 || !strings.Contains(stderr.String(), "from runner") || strings.Contains(stderr.String(), `{"level"`) {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// TestUnknownEnvWarned (issue 15, item 11): RAFTGATE_* variables that name
// no flag are named in a warning at start; those of any command's flags
// (server's, and status's --admin) are not.
func TestUnknownEnvWarned(t *testing.T) {
	_, stderr, code := runCapture(t, []string{"server", "--data-dir", "/d"}, map[string]string{
		"RAFTGATE_NODE_ID": "1", "RAFTGATE_NODEID": "2", "RAFTGATE_MAX_CONCURENT": "5", "RAFTGATE_ADMIN": "http://x",
		"RAFTGATE_ADMIN_TOKEN": "secret-value", "HOME": "/root",
	})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var warning string
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, "RAFTGATE_* environment variables") {
			warning = line
		}
	}
	if !strings.Contains(warning, `"level":"warn"`) || !strings.Contains(warning, `"variables":["RAFTGATE_MAX_CONCURENT","RAFTGATE_NODEID"]`) {
		t.Fatalf("warning %q, want one naming RAFTGATE_MAX_CONCURENT and RAFTGATE_NODEID only (stderr %s)", warning, stderr)
	}
	if strings.Contains(stderr, "secret-value") {
		t.Fatal("a variable's value was logged")
	}
	_, stderr, _ = runCapture(t, []string{"server", "--data-dir", "/d"}, map[string]string{"RAFTGATE_NODE_ID": "1"})
	if strings.Contains(stderr, "environment variables") {
		t.Fatalf("warning without unknown variables: %s", stderr)
	}
}

// TestPortOffset: --port-offset shifts the listen addresses left at their
// defaults, and leaves one given by flag, env or file as given.
func TestPortOffset(t *testing.T) {
	cfg, stderr, code := runCapture(t, []string{"server", "--data-dir", "/d", "--node-id", "2", "--port-offset", "100",
		"--initial-cluster", "1=127.0.0.1:5122,2=127.0.0.1:5222", "--gossip-addr", "127.0.0.1:9999"},
		map[string]string{"RAFTGATE_ADMIN_ADDR": "127.0.0.1:9071"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := []string{cfg.IngressAddr, cfg.AdminAddr, cfg.NodeAddr, cfg.GossipAddr}
	want := []string{"127.0.0.1:8180", "127.0.0.1:9071", "127.0.0.1:5222", "127.0.0.1:9999"}
	if !slices.Equal(got, want) {
		t.Errorf("addresses %v, want %v", got, want)
	}
	if _, stderr, code := runCapture(t, []string{"server", "--data-dir", "/d", "--port-offset", "-1"}, nil); code == 0 || !strings.Contains(stderr, "--port-offset") {
		t.Errorf("--port-offset -1: exit %d, %s", code, stderr)
	}
}
