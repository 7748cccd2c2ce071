package test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// h2Call POSTs body to url with client and returns the protocol and body.
func h2Call(t *testing.T, client *http.Client, url, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("content-type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	return resp.ProtoMajor, string(b)
}

// TestIngressHTTP2Cleartext calls a node's ingress with HTTP/2 without TLS
// (h2c with prior knowledge, as Envoy sends it): Go's HTTP/2 client, and
// curl --http2-prior-knowledge when curl is installed.
func TestIngressHTTP2Cleartext(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 1})
	n := c.nodes[0]
	c.registerService(n, "Echo", newRecorder(t).srv.URL)

	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true) // only h2c: a fallback to HTTP/1 would fail
	h2c := &http.Client{Transport: &http.Transport{Protocols: &protocols}}
	t.Cleanup(h2c.CloseIdleConnections)
	if proto, body := h2Call(t, h2c, n.ingressURL()+"/Echo/echo", `"h2c"`); proto != 2 || body != `"h2c"` {
		t.Fatalf("h2c call: HTTP/%d %q", proto, body)
	}
	// HTTP/1.1 still works on the same port.
	if proto, _ := h2Call(t, &http.Client{}, n.ingressURL()+"/Echo/echo", `"h1"`); proto != 1 {
		t.Fatalf("HTTP/1.1 call answered as HTTP/%d", proto)
	}

	t.Run("curl", func(t *testing.T) {
		curl := lookCurl(t)
		out, err := exec.Command(curl, "-sS", "-i", "--http2-prior-knowledge", "-H", "content-type: application/json",
			"--data", `"curl"`, n.ingressURL()+"/Echo/echo").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "HTTP/2 200") || !strings.HasSuffix(string(out), `"curl"`) {
			t.Fatalf("curl --http2-prior-knowledge: %v\n%s", err, out)
		}
	})
}

// lookCurl returns curl's path, or skips the test without it.
func lookCurl(t *testing.T) string {
	t.Helper()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed")
	}
	return curl
}

// TestIngressHTTP2OverTLS serves the ingress with --ingress-tls-cert: HTTP/2
// is negotiated by ALPN, HTTP/1.1 remains for clients that want it.
func TestIngressHTTP2OverTLS(t *testing.T) {
	p := newPKI(t, "ingress")
	c := startCluster(t, clusterOpts{nodes: 1, extraArgs: func(int) []string {
		return []string{"--ingress-tls-cert", p.certFile, "--ingress-tls-key", p.keyFile}
	}})
	n := c.nodes[0]
	c.registerService(n, "Echo", newRecorder(t).srv.URL)
	url := "https://" + n.ingressAddr + "/Echo/echo"

	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.caPool}, ForceAttemptHTTP2: true}}
	t.Cleanup(h2.CloseIdleConnections)
	if proto, body := h2Call(t, h2, url, `"h2"`); proto != 2 || body != `"h2"` {
		t.Fatalf("TLS call: HTTP/%d %q", proto, body)
	}
	var h1only http.Protocols
	h1only.SetHTTP1(true)
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.caPool}, Protocols: &h1only}}
	t.Cleanup(h1.CloseIdleConnections)
	if proto, _ := h2Call(t, h1, url, `"h1"`); proto != 1 {
		t.Fatalf("HTTP/1.1 over TLS answered as HTTP/%d", proto)
	}

	t.Run("curl", func(t *testing.T) {
		out, err := exec.Command(lookCurl(t), "-sS", "-i", "--http2", "--cacert", p.caFile, "-H", "content-type: application/json",
			"--data", `"curl"`, url).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "HTTP/2 200") {
			t.Fatalf("curl --http2 over TLS: %v\n%s", err, out)
		}
	})
}
