package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/rs/zerolog"
)

// serverTLS serves the listeners' TLS from --tls-cert, --tls-key and
// --tls-client-ca, and swaps in new files when they change: handshakes
// from then on use them, connections already open keep theirs. A change
// that does not load (a key that does not match, a half-written file)
// keeps the files in use and is logged. It is safe for concurrent use.
type serverTLS struct {
	cert, key, clientCA string
	log                 zerolog.Logger
	cur                 atomic.Pointer[tlsConfigs]
}

// tlsConfigs are the configurations built from one loaded set of files.
type tlsConfigs struct {
	proxy, admin *tls.Config
}

// newServerTLS loads the files; nil without --tls-cert.
func newServerTLS(o *deployOptions, log zerolog.Logger) (*serverTLS, error) {
	if o.tlsCert == "" {
		return nil, nil
	}
	s := &serverTLS{cert: o.tlsCert, key: o.tlsKey, clientCA: o.tlsClientCA, log: log}
	c, err := s.load()
	if err != nil {
		return nil, err
	}
	s.cur.Store(c)
	return s, nil
}

// load reads the files into new configurations: TLS 1.2 or newer, and with
// --tls-client-ca a client certificate signed by one of its CAs required
// on the proxy's listener. The admin listener asks for none: Kubernetes
// probes and Prometheus scrapes present no client certificate.
func (s *serverTLS) load() (*tlsConfigs, error) {
	cert, err := tls.LoadX509KeyPair(s.cert, s.key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", s.cert, s.key, err)
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	proxyCfg := base.Clone()
	if s.clientCA != "" {
		pem, err := os.ReadFile(s.clientCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-client-ca %s: no PEM certificate in the file", s.clientCA)
		}
		proxyCfg.ClientCAs = pool
		proxyCfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return &tlsConfigs{proxy: proxyCfg, admin: base}, nil
}

// reload loads the files again; on failure the previous ones stay.
func (s *serverTLS) reload() {
	c, err := s.load()
	if err != nil {
		s.log.Error().Err(err).Msg("TLS files not reloaded; the previous certificate stays")
		return
	}
	s.cur.Store(c)
	s.log.Info().Str("tls_cert", s.cert).Msg("TLS files reloaded; new connections use them")
}

// paths are the files to watch.
func (s *serverTLS) paths() []string {
	p := []string{s.cert, s.key}
	if s.clientCA != "" {
		p = append(p, s.clientCA)
	}
	return p
}

// config returns the listener configuration of the proxy (admin false) or
// the admin server: each handshake takes the configuration loaded last.
func (s *serverTLS) config(admin bool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := s.cur.Load()
			if admin {
				return c.admin, nil
			}
			return c.proxy, nil
		},
	}
}
