package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeCert writes a PEM certificate (signed by parent, or self-signed
// when parent is nil) and its key, and returns them with the paths.
func writeCert(t *testing.T, dir, name string, isCA bool, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, string, string) {
	t.Helper()
	return writeCertValid(t, dir, name, isCA, parent, parentKey, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
}

// writeCertValid is writeCert for a certificate valid from notBefore to
// notAfter.
func writeCertValid(t *testing.T, dir, name string, isCA bool, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, notBefore, notAfter time.Time) (*x509.Certificate, *ecdsa.PrivateKey, string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	keyDER, _ := x509.MarshalECPrivateKey(key)
	certPath, keyPath := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key, certPath, keyPath
}

// handshake runs one TLS exchange over 127.0.0.1 and returns the client's
// error (nil when the server echoed).
func handshake(t *testing.T, server, client *tls.Config) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		return err
	}
	// With TLS 1.3 a refused client certificate shows on the first read.
	_, err = io.ReadFull(c, make([]byte, 1))
	return err
}

func TestNodeTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, caPath, _ := writeCert(t, dir, "ca", true, nil, nil)
	_, _, certPath, keyPath := writeCert(t, dir, "node", false, ca, caKey)
	otherCA, otherKey, _, _ := writeCert(t, dir, "other-ca", true, nil, nil)
	_, _, strangerCert, strangerKey := writeCert(t, dir, "stranger", false, otherCA, otherKey)
	now := time.Now()
	_, _, expiredCert, expiredKey := writeCertValid(t, dir, "expired", false, ca, caKey, now.Add(-2*time.Hour), now.Add(-time.Hour))
	_, _, futureCert, futureKey := writeCertValid(t, dir, "future", false, ca, caKey, now.Add(time.Hour), now.Add(2*time.Hour))

	if s, c, err := nodeTLS(Config{}); s != nil || c != nil || err != nil {
		t.Fatalf("TLS off: %v %v %v", s, c, err)
	}
	server, client, err := nodeTLS(Config{TLSCert: certPath, TLSKey: keyPath, TLSCA: caPath})
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, server, client); err != nil {
		t.Fatalf("mutual TLS between nodes of one CA: %v", err)
	}
	_, stranger, err := nodeTLS(Config{TLSCert: strangerCert, TLSKey: strangerKey, TLSCA: caPath})
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, server, stranger); err == nil {
		t.Fatal("a node with a certificate of another CA got through")
	}
	noCert := client.Clone()
	noCert.Certificates = nil
	if err := handshake(t, server, noCert); err == nil {
		t.Fatal("a client without a certificate got through")
	}

	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{TLSCert: "/nonexistent", TLSKey: keyPath}, "--tls-cert/--tls-key"},
		{Config{TLSCert: certPath, TLSKey: keyPath, TLSCA: "/nonexistent"}, "--tls-ca"},
		{Config{TLSCert: certPath, TLSKey: keyPath, TLSCA: keyPath}, "--tls-ca: no PEM certificate"},
		{Config{TLSCert: expiredCert, TLSKey: expiredKey, TLSCA: caPath}, "--tls-cert: the certificate expired at"},
		{Config{TLSCert: futureCert, TLSKey: futureKey, TLSCA: caPath}, "--tls-cert: the certificate is not valid before"},
	} {
		if _, _, err := nodeTLS(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}
