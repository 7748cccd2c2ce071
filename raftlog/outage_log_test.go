package raftlog

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestOutageCausesLoggedOncePerCause (issue 15, item 10): causes that
// alternate, or differ only in the addresses and ports of the connection
// that failed, are each logged at Warn once per outage.
func TestOutageCausesLoggedOncePerCause(t *testing.T) {
	tlsRefused := errors.New(`rpc error: code = Unavailable desc = connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`)
	pipe := func(port string) error {
		return errors.New("rpc error: code = Unavailable desc = write tcp 127.0.0.1:" + port + "->127.0.0.1:5222: write: broken pipe")
	}
	pipe6 := func(port string) error {
		return errors.New("rpc error: code = Unavailable desc = write tcp [::1]:" + port + "->[fe80::1%eth0]:5222: write: broken pipe")
	}
	var out strings.Builder
	p := &peerSender{
		t:   &grpcTransport{ctx: context.Background(), n: &Node{metrics: newMetrics(nil, nil, nil)}},
		ctx: context.Background(),
		log: zerolog.New(&out).Level(zerolog.DebugLevel),
	}
	errs := []error{tlsRefused, pipe("40001"), tlsRefused, pipe("40002"), tlsRefused, pipe("40003"),
		pipe6("40004"), tlsRefused, pipe6("40005")}
	for _, err := range errs {
		p.fail(nil, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	warns := 0
	for _, line := range lines {
		if strings.Contains(line, `"level":"warn"`) {
			warns++
		}
	}
	// One for the TLS refusal, one for a broken pipe whatever its addresses.
	if len(lines) != len(errs) || warns != 2 {
		t.Fatalf("%d lines, %d at warn; want %d lines, 2 at warn:\n%s", len(lines), warns, len(errs), out.String())
	}
	for i := range maxOutageCauses * 2 {
		p.outage.first(errors.New("cause " + string(rune('a'+i))))
	}
	if len(p.outage) > maxOutageCauses {
		t.Fatalf("%d causes remembered, bound %d", len(p.outage), maxOutageCauses)
	}
}
