package main

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
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestTLS: rediss:// reaches a TLS redis-server whose certificate a private CA signed, given
// by SSL_CERT_FILE; without it the certificate is refused (69), unless skip_verify=true.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	caFile, certFile, keyFile := writeCerts(t, dir)
	cfg := tlsClientConfig(t, caFile)
	port := launchRedis(t, 1, func(ports []string) []string {
		return []string{"--port", "0", "--tls-port", ports[0], "--tls-cert-file", certFile, "--tls-key-file", keyFile,
			"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no", "--requirepass", authPassword}
	}, func(ports []string) *redis.Client {
		return redis.NewClient(&redis.Options{Addr: "localhost:" + ports[0], Password: authPassword, MaxRetries: -1, TLSConfig: cfg})
	})[0]

	url := "rediss://:" + authPassword + "@localhost:" + port + "/0"
	tg := target(t)
	if r := runBin(t, []string{"SSL_CERT_FILE=" + caFile}, "exec", "-n", "--redis", url, "CLI", tg, "true"); r.code != 0 {
		t.Fatal(r)
	}
	r := runBin(t, []string{"SSL_CERT_FILE=" + caFile, "REDIS_URL=" + url}, "status", "CLI", tg)
	if r.code != 0 || !strings.Contains(r.stdout, "state:       free") {
		t.Fatal(r)
	}
	r = runBin(t, []string{"SSL_CERT_FILE=" + filepath.Join(dir, "none.pem")}, "status", "--redis", url, "CLI", tg)
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "certificate") || strings.Contains(r.stderr, authPassword) {
		t.Fatal(r)
	}
	r = runBin(t, []string{"SSL_CERT_FILE=" + filepath.Join(dir, "none.pem")}, "status", "--redis", url+"?skip_verify=true", "CLI", tg)
	if r.code != 0 {
		t.Fatal(r)
	}
	// The scheme that does not match the port — rediss:// to a plain server, whose silence
	// the TLS handshake waits on, or redis:// to a TLS port — is named as the likely cause.
	for _, url := range []string{"rediss://" + srv.Addr, "redis://:" + authPassword + "@localhost:" + port} {
		r := runBin(t, []string{"SSL_CERT_FILE=" + caFile}, "status", "--timeout", "2s", "--redis", url, "CLI", tg)
		if r.code != exitUnavailable || !strings.Contains(r.stderr, "TLS") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%s: want exit 69 and one line naming TLS, got %v", url, r)
		}
	}
}

// tlsClientConfig returns a client's TLS configuration that trusts the CA in caFile and
// expects the name localhost.
func tlsClientConfig(t *testing.T, caFile string) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(caFile)
	if err != nil || !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("CA: %v", err)
	}
	return &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
}

// writeCerts writes a CA and a server certificate it signed for localhost and 127.0.0.1, as
// PEM files in dir.
func writeCerts(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dlock test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server.key", "EC PRIVATE KEY", keyDER)
}

// TestTLSReachesSentinelsAndClusterNodes: rediss:// reaches, over TLS, the Sentinels and the
// master they name, and a Cluster's nodes at the addresses the Cluster gives (127.0.0.1 for a
// seed named localhost), the certificate checked against the URL's host, as go-redis's own
// dialer does.
func TestTLSReachesSentinelsAndClusterNodes(t *testing.T) {
	dir := t.TempDir()
	caFile, certFile, keyFile := writeCerts(t, dir)
	cfg := tlsClientConfig(t, caFile)
	tlsClient := func(port string) *redis.Client {
		return redis.NewClient(&redis.Options{Addr: "localhost:" + port, TLSConfig: cfg, MaxRetries: -1})
	}
	tlsArgs := []string{"--port", "0", "--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "no"}
	master := launchRedis(t, 1, func(ports []string) []string { return slices.Concat(tlsArgs, []string{"--tls-port", ports[0]}) },
		func(ports []string) *redis.Client { return tlsClient(ports[0]) })[0]
	node := launchRedis(t, 2, func(ports []string) []string {
		return slices.Concat(tlsArgs, []string{"--tls-port", ports[0], "--tls-cluster", "yes", "--cluster-enabled", "yes",
			"--cluster-port", ports[1], "--cluster-config-file", filepath.Join(dir, "nodes.conf")})
	}, func(ports []string) *redis.Client { return tlsClient(ports[0]) })[0]
	sentinel := launchSentinel(t, func(port string) []string {
		return []string{"port 0", "tls-port " + port, "tls-cert-file " + certFile, "tls-key-file " + keyFile, "tls-ca-cert-file " + caFile,
			"tls-auth-clients no", "tls-replication yes", "sentinel monitor m 127.0.0.1 " + master + " 1"}
	}, tlsClient)

	ctx := context.Background()
	nc := tlsClient(node)
	defer nc.Close()
	if err := nc.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the one-node Cluster to be ok", func() bool {
		info, err := nc.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})
	sc := redis.NewSentinelClient(&redis.Options{Addr: "localhost:" + sentinel, TLSConfig: cfg, MaxRetries: -1})
	defer sc.Close()
	waitFor(t, "the TLS Sentinel to name the master", func() bool { return sc.GetMasterAddrByName(ctx, "m").Err() == nil })

	for _, redisArgs := range [][]string{
		{"--cluster", "--redis", "rediss://localhost:" + node},
		{"--redis", "rediss://localhost:" + node + "?addr=127.0.0.1:" + node},
		{"--redis", "rediss://localhost:" + sentinel + "?master_name=m"},
		{"--sentinel-master", "m", "--redis", "rediss://127.0.0.1:" + sentinel},
	} {
		tg := target(t)
		if r := runBin(t, []string{"SSL_CERT_FILE=" + caFile}, append(append([]string{"exec", "-n"}, redisArgs...), "CLI", tg, "true")...); r.code != 0 {
			t.Errorf("%v: %v", redisArgs, r)
		}
	}
}

// TestTLSHandshakeClosed: rediss:// to a server that closes each connection at once (a plain
// TCP service, a proxy without a backend) is named as a TLS handshake that the server closed,
// exit 69 in one line naming the address once — not a bare "EOF" or "connection reset by
// peer" — for one server as for a Cluster node or a Sentinel.
func TestTLSHandshakeClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	addr := ln.Addr().String()
	for _, redisArgs := range [][]string{
		{"--redis", "rediss://" + addr},
		{"--cluster", "--redis", "rediss://" + addr},
		{"--sentinel-master", "m", "--redis", "rediss://" + addr},
	} {
		r := runBin(t, nil, append(append([]string{"status", "--timeout", "2s"}, redisArgs...), "CLI", "x")...)
		if r.code != exitUnavailable || !strings.Contains(r.stderr, "TLS handshake") || strings.Count(r.stderr, addr) != 1 ||
			!strings.Contains(r.stderr, "closed the connection") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: want exit 69 and one line naming the TLS handshake that the server closed and %s once, got %v", redisArgs, addr, r)
		}
	}
}
