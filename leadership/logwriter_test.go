package leadership

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/rs/zerolog"
)

func TestMemberlistLogLevels(t *testing.T) {
	for _, tc := range []struct{ line, level, msg string }{
		{"[DEBUG] memberlist: Stream connection from=1.2.3.4:5\n", "debug", "Stream connection from=1.2.3.4:5"},
		{"[WARN] memberlist: Refuting a suspect message\n", "warn", "Refuting a suspect message"},
		{"[ERR] memberlist: Failed to send\n", "error", "Failed to send"},
		{"[INFO] memberlist: Suspect node\n", "info", "Suspect node"},
		{"no prefix at all\n", "info", "no prefix at all"},
	} {
		var buf bytes.Buffer
		w := memberlistLog{log: zerolog.New(&buf)}
		if _, err := w.Write([]byte(tc.line)); err != nil {
			t.Fatal(err)
		}
		var got struct{ Level, Message string }
		if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
			t.Fatalf("%q: %v", buf.String(), err)
		}
		if got.Level != tc.level || got.Message != tc.msg {
			t.Errorf("%q logged as %s %q, want %s %q", tc.line, got.Level, got.Message, tc.level, tc.msg)
		}
	}
}

// TestMemberlistLogClosedSocketWhileClosing: memberlist's Shutdown closes
// its sockets before it stops gossiping; the send error that follows is
// debug while closing, an error otherwise.
func TestMemberlistLogClosedSocketWhileClosing(t *testing.T) {
	const line = "[ERR] memberlist: Failed to send gossip to 127.0.0.1:8146: write udp 127.0.0.1:8046->127.0.0.1:8146: use of closed network connection\n"
	closing := make(chan struct{})
	for _, tc := range []struct {
		name, level string
		before      func()
	}{
		{"running", "error", func() {}},
		{"closing", "debug", func() { close(closing) }},
	} {
		tc.before()
		var buf bytes.Buffer
		w := memberlistLog{log: zerolog.New(&buf), closing: closing}
		w.Write([]byte(line))
		var got struct{ Level string }
		if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
			t.Fatalf("%q: %v", buf.String(), err)
		}
		if got.Level != tc.level {
			t.Errorf("%s: logged at %s, want %s", tc.name, got.Level, tc.level)
		}
	}
}
