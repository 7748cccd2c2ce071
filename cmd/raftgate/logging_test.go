package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/server"
	"github.com/raftgate/raftgate/server/servertest"
	"github.com/raftgate/raftgate/test/freeport"
)

// TestLogDurations (issue 15, item 10): durations carry their unit in JSON
// as on the console, and times have millisecond resolution, whichever
// logger was built before.
func TestLogDurations(t *testing.T) {
	const took = 4276 * time.Millisecond
	var console bytes.Buffer
	log, err := newLogger(&console, "console", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Dur("took", took).Dur("grace", 10*time.Second).Msg("stopped")
	// Not a terminal: no colour codes.
	if strings.Contains(console.String(), "\x1b[") {
		t.Errorf("colour codes written to a buffer: %q", console.String())
	}
	for _, want := range []string{"took=4.276s", "grace=10s"} {
		if !strings.Contains(console.String(), want) {
			t.Errorf("console line %q lacks %q", console.String(), want)
		}
	}
	if !regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} `).MatchString(console.String()) {
		t.Errorf("console time without milliseconds: %q", console.String())
	}

	var jsonOut bytes.Buffer
	if log, err = newLogger(&jsonOut, "json", "info"); err != nil {
		t.Fatal(err)
	}
	log.Info().Dur("took", took).Msg("stopped")
	var line struct {
		Took any
		Time string
	}
	if err := json.Unmarshal(jsonOut.Bytes(), &line); err != nil {
		t.Fatalf("%q: %v", jsonOut.String(), err)
	}
	if line.Took != "4.276s" {
		t.Errorf("JSON took = %#v, want \"4.276s\" (line %q)", line.Took, jsonOut.String())
	}
	if _, err := time.Parse(time.RFC3339, line.Time); err != nil || !regexp.MustCompile(`T\d\d:\d\d:\d\d\.\d{3}`).MatchString(line.Time) {
		t.Errorf("JSON time %q is not RFC 3339 with milliseconds (%v)", line.Time, err)
	}
}

// TestNodeLogNamesEachComponentOnce (issue 15, item 10): no line of a
// node's log carries "component" twice, the admin API's and the ingress
// handler's included.
func TestNodeLogNamesEachComponentOnce(t *testing.T) {
	var out testutil.LockedBuffer
	logger, err := newLogger(&out, "json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	_, cfgs := servertest.StartCluster(t, 1, freeport.Cmd, func(c *server.Config) { c.Logger = logger })
	admin, ingress := "http://"+cfgs[0].AdminAddr, "http://"+cfgs[0].IngressAddr
	for _, c := range []struct {
		method, url, body string
		want              int
	}{
		{"GET", admin + "/services/Nope", "", 404}, // logged by the admin API at debug
		{"PUT", admin + "/services/Echo", `{"url":"http://127.0.0.1:1"}`, 201},
		// No time to append: a 503 the ingress handler logs at warn.
		{"POST", ingress + "/Echo/echo?timeout=1ns", "", 503},
	} {
		req, err := http.NewRequest(c.method, c.url, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Fatalf("%s %s: %d, want %d", c.method, c.url, resp.StatusCode, c.want)
		}
	}
	components := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if n := strings.Count(line, `"component":`); n > 1 {
			t.Errorf("%d components in %s", n, line)
		}
		var l struct{ Component string }
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		components[l.Component]++
	}
	for _, c := range []string{"admin", "ingress", "raftlog"} {
		if components[c] == 0 {
			t.Errorf("no line of component %s (lines by component: %v)", c, components)
		}
	}
}
