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
		w := memberlistLog{zerolog.New(&buf)}
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
