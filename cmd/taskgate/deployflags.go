package main

import (
	"errors"
	"flag"
	"time"
)

// defaultDrainDelay: long enough for Kubernetes to take the pod out of its
// Service's endpoints after /readyz turns 503 (the kubelet's readiness
// period is 10 s by default, but the endpoint is removed as soon as the pod
// is marked terminating; kube-proxy and ingress controllers then need a
// few seconds to apply it), short enough not to slow a rollout.
const defaultDrainDelay = 5 * time.Second

// deployOptions are the flags of taskgate's deployment: draining and TLS.
type deployOptions struct {
	drainDelay                   time.Duration
	tlsCert, tlsKey, tlsClientCA string
}

// deployFlags defines the deployment flags on fs.
func deployFlags(fs *flag.FlagSet, o *deployOptions) {
	durationVar(fs, &o.drainDelay, "drain-delay", defaultDrainDelay,
		"on SIGTERM, how long /readyz answers 503 while the proxy still accepts and serves new connections (so load balancers remove the pod first); then it stops accepting and --shutdown-grace starts; a second SIGTERM ends the delay at once; 0 = none")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate (chain) file: the proxy's and the admin server's listeners speak TLS 1.2+ with it (reloaded when the file changes); needs --tls-key")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key file of --tls-cert")
	fs.StringVar(&o.tlsClientCA, "tls-client-ca", "", "PEM file of the CAs whose client certificates the proxy's listener requires (mutual TLS; the admin listener does not ask, so probes work); needs --tls-cert")
}

// validate checks the deployment flags.
func (o *deployOptions) validate() error {
	switch {
	case o.drainDelay < 0:
		return errors.New("--drain-delay: must not be negative")
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return errors.New("--tls-cert and --tls-key go together: give both or neither")
	case o.tlsClientCA != "" && o.tlsCert == "":
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)")
	}
	return nil
}
