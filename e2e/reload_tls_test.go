package e2e

import (
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
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// toolTaskSupport returns the execution.taskSupport tools/list gives tool.
func toolTaskSupport(c *rawClient, tool string) string {
	var tl struct {
		Tools []struct {
			Name      string `json:"name"`
			Execution struct {
				TaskSupport string `json:"taskSupport"`
			} `json:"execution"`
		} `json:"tools"`
	}
	c.result("tools/list", nil, &tl)
	for _, x := range tl.Tools {
		if x.Name == tool {
			return x.Execution.TaskSupport
		}
	}
	return ""
}

// configMapDir lays out a directory as the kubelet does for a ConfigMap
// volume: name -> ..data/name, ..data -> ..<version>/; swap replaces the
// ..data symlink atomically with one to a new version holding content.
type configMapDir struct {
	t   *testing.T
	dir string
	n   int
}

func (d *configMapDir) swap(name, content string) {
	d.t.Helper()
	d.n++
	ver := filepath.Join(d.dir, "..v"+strings.Repeat("x", d.n))
	if err := os.Mkdir(ver, 0o755); err != nil {
		d.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ver, name), []byte(content), 0o644); err != nil {
		d.t.Fatal(err)
	}
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ver), tmp); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		d.t.Fatal(err)
	}
	link := filepath.Join(d.dir, name)
	if _, err := os.Lstat(link); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			d.t.Fatal(err)
		}
	}
}

// The policy file is reloaded when it changes on disk, without a signal:
// written in place, and through a ConfigMap volume's symlink swap; a bad
// file keeps the previous policy and says why.
func TestPolicyReloadOnFileChange(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	const optional, forbidden, bad = "rules:\n  - match: echo\n    taskSupport: optional\n",
		"rules:\n  - match: echo\n    taskSupport: forbidden\n", "rules:\n  - match: echo\n    taskSupport: sometimes\n"

	t.Run("configmap symlink swap", func(t *testing.T) {
		cm := &configMapDir{t: t, dir: t.TempDir()}
		cm.swap("policy.yaml", optional)
		gw := startTaskgate(t, up.URL, "--config", filepath.Join(cm.dir, "policy.yaml"))
		c := newRawClient(t, gw.URL)
		c.initialize()
		if s := toolTaskSupport(c, "echo"); s != "optional" {
			t.Fatalf("echo at start: %q, want optional", s)
		}
		cm.swap("policy.yaml", forbidden)
		waitFor(t, 15*time.Second, "the swapped policy", func() bool { return toolTaskSupport(c, "echo") == "forbidden" })
		cm.swap("policy.yaml", bad)
		waitFor(t, 15*time.Second, "the refused reload to be logged", func() bool {
			out := gw.p.Output()
			return strings.Contains(out, "policy file not reloaded; the previous policy stays") && strings.Contains(out, `"cause":"file changed"`)
		})
		if s := toolTaskSupport(c, "echo"); s != "forbidden" {
			t.Errorf("echo after a bad file: %q, want the previous policy's forbidden", s)
		}
		cm.swap("policy.yaml", optional)
		waitFor(t, 15*time.Second, "the fixed policy", func() bool { return toolTaskSupport(c, "echo") == "optional" })
	})
	t.Run("written in place", func(t *testing.T) {
		pol := writePolicy(t, optional)
		gw := startTaskgate(t, up.URL, "--config", pol)
		c := newRawClient(t, gw.URL)
		c.initialize()
		if err := os.WriteFile(pol, []byte(forbidden), 0o600); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 15*time.Second, "the rewritten policy", func() bool { return toolTaskSupport(c, "echo") == "forbidden" })
	})
}

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files.
type testPKI struct {
	dir            string
	ca             *x509.Certificate
	caKey          *ecdsa.PrivateKey
	pool           *x509.CertPool
	certFile       string
	keyFile        string
	caFile         string
	clientCert     tls.Certificate
	serverSerialNo *big.Int
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir()}
	p.caKey = genKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "taskgate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.pool = x509.NewCertPool()
	p.pool.AddCert(p.ca)
	p.caFile = filepath.Join(p.dir, "ca.pem")
	writePEM(t, p.caFile, "CERTIFICATE", der)
	p.certFile, p.keyFile = filepath.Join(p.dir, "tls.crt"), filepath.Join(p.dir, "tls.key")
	p.issueServer(t, 100)
	cder, ckey := p.issue(t, 200, "client", x509.ExtKeyUsageClientAuth)
	kb, _ := x509.MarshalECPrivateKey(ckey)
	p.clientCert, err = tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cder}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func genKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func (p *testPKI) issue(t *testing.T, serial int64, cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key := genKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

// issueServer writes a new server certificate and key (replacing the files
// by rename, as a certificate manager does).
func (p *testPKI) issueServer(t *testing.T, serial int64) {
	t.Helper()
	der, key := p.issue(t, serial, "taskgate", x509.ExtKeyUsageServerAuth)
	kb, _ := x509.MarshalECPrivateKey(key)
	writePEM(t, p.keyFile, "EC PRIVATE KEY", kb)
	writePEM(t, p.certFile, "CERTIFICATE", der)
	p.serverSerialNo = big.NewInt(serial)
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TLS on both listeners (1.2+), client certificates required on the
// proxy's with --tls-client-ca but not on the admin one, the healthcheck
// subcommand over https, and a renewed certificate served without a
// restart.
func TestTLSListeners(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	pki := newTestPKI(t)
	withCert := func(c *tls.Config) *http.Client {
		tr := &http.Transport{TLSClientConfig: c}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	adminClient := withCert(&tls.Config{RootCAs: pki.pool})
	ready := func(g *gateway) bool {
		resp, err := adminClient.Get(g.Admin + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	gw := startTaskgateEnv(t, nil, up.URL, func(g *gateway) bool {
		g.URL = strings.Replace(g.URL, "http://", "https://", 1)
		g.Admin = strings.Replace(g.Admin, "http://", "https://", 1)
		return ready(g)
	}, "--tls-cert", pki.certFile, "--tls-key", pki.keyFile, "--tls-client-ca", pki.caFile)

	c := newRawClient(t, gw.URL)
	c.hc = withCert(&tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.clientCert}})
	c.initialize()
	if r := c.call("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "over tls"}}); !strings.Contains(string(r.Body), "over tls") {
		t.Errorf("tools/call over mutual TLS: HTTP %d %q", r.Status, r.Body)
	}
	if _, err := withCert(&tls.Config{RootCAs: pki.pool}).Get(gw.URL); err == nil {
		t.Errorf("the proxy's listener served a client without a certificate")
	}
	if _, err := withCert(&tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.clientCert},
		MaxVersion: tls.VersionTLS11}).Get(gw.URL); err == nil {
		t.Errorf("the proxy's listener accepted TLS 1.1")
	}
	if st := httpStatus(strings.Replace(gw.URL, "https://", "http://", 1)); st == http.StatusOK {
		t.Errorf("plain HTTP on the TLS listener: 200")
	}
	resp, err := adminClient.Get(gw.Admin + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("admin /readyz over TLS without a client certificate: %v %v", resp, err)
	}
	resp.Body.Close()

	hc := exec.Command(taskgateBin, "healthcheck", "--admin-listen", strings.TrimPrefix(gw.Admin, "https://"), "--path", "/readyz")
	hc.Env = append(envWithout(os.Environ(), "TASKGATE_"), "TASKGATE_TLS_CERT="+pki.certFile)
	if out, err := hc.CombinedOutput(); err != nil {
		t.Errorf("taskgate healthcheck with TASKGATE_TLS_CERT: %v %s", err, out)
	}

	serial := func() *big.Int {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(gw.Admin, "https://"), &tls.Config{RootCAs: pki.pool})
		if err != nil {
			return nil
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}
	if s := serial(); s == nil || s.Int64() != 100 {
		t.Fatalf("served certificate serial %v, want 100", s)
	}
	pki.issueServer(t, 101)
	waitFor(t, 15*time.Second, "the renewed certificate", func() bool { s := serial(); return s != nil && s.Int64() == 101 })
	waitFor(t, 15*time.Second, "the reload to be logged", func() bool {
		return strings.Contains(gw.p.Output(), "TLS files reloaded")
	})
	// A broken file keeps the certificate in use.
	if err := os.WriteFile(pki.certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the refused reload to be logged", func() bool {
		return strings.Contains(gw.p.Output(), "TLS files not reloaded; the previous certificate stays")
	})
	if s := serial(); s == nil || s.Int64() != 101 {
		t.Errorf("after a broken file the served serial is %v, want 101", s)
	}
}
