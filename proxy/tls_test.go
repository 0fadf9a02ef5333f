package proxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/policy"
)

// testCA returns a pool holding a new CA and a certificate that CA signed
// for 127.0.0.1.
func testCA(t *testing.T) (*x509.CertPool, *tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "taskgate test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "upstream"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, &tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}
}

// TestTLSUpstream: an https upstream whose certificate a private CA signed
// (Config.UpstreamTLS.RootCAs). Each of the three kinds of upstream
// connection speaks TLS with it: the pass-through relay (plain tools/call),
// the HostClient of rewritten answers (initialize) and the background pool
// of task calls; each connection is reused.
func TestTLSUpstream(t *testing.T) {
	pool, cert := testCA(t)
	up := newFakeUpstreamTLS(t, cert)
	e := newTaskEnvOn(t, testPol(t), Config{UpstreamTLS: &tls.Config{RootCAs: pool}}, nil, up)

	for i := range 2 {
		r := e.call(alice, fmt.Sprintf("i%d", i), "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}`)
		var res struct {
			Capabilities struct {
				Tasks json.RawMessage `json:"tasks"`
			} `json:"capabilities"`
		}
		if r.Error != nil || json.Unmarshal(r.Result, &res) != nil || res.Capabilities.Tasks == nil {
			t.Fatalf("initialize over TLS: %s", r.raw)
		}
		r = e.call(alice, i, "tools/call", `{"name":"echo","arguments":{"text":"over tls"}}`)
		if r.httpStatus != 200 || !strings.Contains(string(r.Result), `"over tls"`) {
			t.Fatalf("plain tools/call over TLS: %d %s", r.httpStatus, r.raw)
		}
		task := e.createTask(alice, "echo", `{"text":"task over tls"}`, `{}`)
		e.waitStatus(alice, task.TaskID, "completed")
		r = e.call(alice, "r", "tasks/result", fmt.Sprintf(`{"taskId":%q}`, task.TaskID))
		if r.Error != nil || !strings.Contains(string(r.Result), `"task over tls"`) {
			t.Fatalf("tasks/result of a task run over TLS: %s", r.raw)
		}
	}
	if err := e.h.PingUpstream(context.Background()); err != nil {
		t.Errorf("PingUpstream of a trusted TLS upstream: %v", err)
	}
	reqs, _, _ := up.snapshot()
	if len(reqs) != 6 {
		t.Errorf("upstream saw %d requests, want 6", len(reqs))
	}
	if pass, bg := e.h.idleConns(); pass+bg < 2 {
		t.Errorf("%d idle TLS connections pooled after the calls, want the relay's and the runner's", pass+bg)
	}
}

// TestTLSUpstreamUntrusted: without the CA, the system's roots do not
// trust the upstream: a plain call gets 502 with a JSON-RPC error that says
// so, a task fails with a message naming the certificate, and the readiness
// check fails.
func TestTLSUpstreamUntrusted(t *testing.T) {
	_, cert := testCA(t)
	up := newFakeUpstreamTLS(t, cert)
	e := newTaskEnvOn(t, testPol(t), Config{}, nil, up)
	r := e.call(alice, 1, "tools/call", `{"name":"echo","arguments":{"text":"x"}}`)
	if r.httpStatus != 502 || r.Error == nil || string(r.ID) != "1" || !strings.Contains(r.Error.Message, "certificate not trusted") {
		t.Fatalf("plain call to an untrusted upstream: %d %s", r.httpStatus, r.raw)
	}
	task := e.createTask(alice, "echo", `{"text":"x"}`, `{}`)
	got := e.waitStatus(alice, task.TaskID, "failed")
	if !strings.Contains(got.StatusMessage, "certificate") {
		t.Errorf("statusMessage = %q, want it to name the certificate", got.StatusMessage)
	}
	if err := e.h.PingUpstream(context.Background()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("PingUpstream of an untrusted TLS upstream: %v; want an error naming the certificate (readyz)", err)
	}
	if reqs, _, _ := up.snapshot(); len(reqs) != 0 {
		t.Errorf("upstream received %d requests over an untrusted connection", len(reqs))
	}
}

func testPol(t *testing.T) *policy.Policy {
	t.Helper()
	pol, err := policy.Parse([]byte(testPolicy), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return pol
}
