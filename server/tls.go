package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"
)

// nodeTLS builds the TLS configs of node-to-node gRPC from --tls-cert,
// --tls-key and --tls-ca; both are nil when TLS is off. The client config
// presents this node's certificate too, and with --tls-ca both sides verify
// the peer against that CA (mutual TLS), so a node without a certificate
// signed by it cannot inject Raft messages. Peers are dialled by the
// addresses in --initial-cluster, so certificates must name those hosts or
// IPs (SANs).
func nodeTLS(cfg Config) (server, client *tls.Config, err error) {
	if cfg.TLSCert == "" {
		return nil, nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	// Every peer would refuse a certificate outside its validity: say so
	// now, not as handshake failures later.
	if leaf, now := cert.Leaf, time.Now(); leaf != nil {
		if now.After(leaf.NotAfter) {
			return nil, nil, fmt.Errorf("--tls-cert: the certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		if now.Before(leaf.NotBefore) {
			return nil, nil, fmt.Errorf("--tls-cert: the certificate is not valid before %s (is the clock right?)", leaf.NotBefore.UTC().Format(time.RFC3339))
		}
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	client = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	if cfg.TLSCA != "" {
		pem, err := os.ReadFile(cfg.TLSCA)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, errors.New("--tls-ca: no PEM certificate in the file")
		}
		server.ClientCAs = pool
		server.ClientAuth = tls.RequireAndVerifyClientCert
		client.RootCAs = pool
	}
	return server, client, nil
}

// loadIngressTLS builds the ingress's TLS config from --ingress-tls-cert and
// --ingress-tls-key; nil when they are not set. The certificate is read
// once: a new one needs a restart.
func loadIngressTLS(cfg Config) (*tls.Config, error) {
	if cfg.IngressTLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.IngressTLSCert, cfg.IngressTLSKey)
	if err != nil {
		return nil, fmt.Errorf("--ingress-tls-cert/--ingress-tls-key: %w", err)
	}
	if leaf := cert.Leaf; leaf != nil && time.Now().After(leaf.NotAfter) {
		return nil, fmt.Errorf("--ingress-tls-cert: the certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
