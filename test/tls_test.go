package test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftgate/raftgate/raftlog/raftlogpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// pki is a CA and one certificate it signed, written as PEM files.
type pki struct {
	caFile, certFile, keyFile string
	caPool                    *x509.CertPool
	cert                      tls.Certificate
}

// newPKI makes a CA and a certificate for 127.0.0.1 valid as both server
// and client (mutual TLS between nodes).
func newPKI(t *testing.T, name string) pki {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name + " CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: name + " node"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	p := pki{
		caFile:   filepath.Join(dir, "ca.pem"),
		certFile: filepath.Join(dir, "node.pem"),
		keyFile:  filepath.Join(dir, "node-key.pem"),
		caPool:   x509.NewCertPool(),
	}
	write := func(path, typ string, b []byte) {
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(p.caFile, "CERTIFICATE", caDER)
	write(p.certFile, "CERTIFICATE", der)
	write(p.keyFile, "EC PRIVATE KEY", keyDER)
	p.caPool.AddCert(caCert)
	p.cert, err = tls.LoadX509KeyPair(p.certFile, p.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMutualTLSBetweenNodes runs a cluster with mutual TLS on the node
// port and checks that it serves, and that a peer without a certificate
// from the cluster's CA (or without TLS) cannot send Raft messages.
func TestMutualTLSBetweenNodes(t *testing.T) {
	good := newPKI(t, "cluster")
	c := startCluster(t, clusterOpts{nodes: 3, extraArgs: func(int) []string {
		return []string{"--tls-cert", good.certFile, "--tls-key", good.keyFile, "--tls-ca", good.caFile}
	}})
	rec := newRecorder(t)
	c.registerService(c.nodes[0], "Echo", rec.srv.URL)
	r, err := do(context.Background(), http.MethodPost, c.nodes[1].ingressURL()+"/Echo/echo", []byte(`"tls"`), nil)
	if err != nil || r.status != http.StatusOK || string(r.body) != `"tls"` {
		t.Fatalf("call over a TLS cluster: %v %+v", err, r)
	}

	target := c.nodes[0].nodeAddr
	bad := newPKI(t, "intruder")
	cases := map[string]credentials.TransportCredentials{
		"plaintext": insecure.NewCredentials(),
		"certificate from another CA": credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{bad.cert},
			RootCAs:      good.caPool, // trusts the server, but the server must not trust it
		}),
		"no client certificate": credentials.NewTLS(&tls.Config{RootCAs: good.caPool}),
	}
	for name, creds := range cases {
		t.Run(name, func(t *testing.T) {
			conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			stream, err := raftlogpb.NewRaftClient(conn).Send(ctx)
			if err == nil {
				err = stream.Send(&raftlogpb.RaftBatch{From: 2, To: 1})
				if err == nil {
					_, err = stream.CloseAndRecv()
				}
			}
			if err == nil {
				t.Fatalf("a peer with %s sent a Raft batch", name)
			}
		})
	}

	// The cluster still serves after the attempts.
	r, err = do(context.Background(), http.MethodPost, c.nodes[2].ingressURL()+"/Echo/echo", []byte(`"still"`), nil)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("call after intrusion attempts: %v %+v", err, r)
	}
}
