package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// healthcheck is the "taskgate healthcheck" subcommand, for container
// health checks in images without a shell or curl: it GETs a path of the
// admin server (--admin-listen, TASKGATE_ADMIN_LISTEN as for the server;
// an unspecified host such as 0.0.0.0 means this machine's loopback) and
// exits 0 on HTTP 200, 1 otherwise, 2 on bad flags. With --tls (or when
// TASKGATE_TLS_CERT is set, as for the server) it speaks https and does not
// verify the certificate: it checks its own process on loopback, whose
// certificate names the pod's service, not 127.0.0.1.
func healthcheck(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("taskgate healthcheck", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	admin := fs.String("admin-listen", defaultAdminListen, "the taskgate admin address to check")
	path := fs.String("path", "/healthz", "path to GET: /healthz (alive), /readyz (serving) or /readyz/store (task store)")
	useTLS := fs.Bool("tls", false, "speak https (the server runs with --tls-cert); default: when TASKGATE_TLS_CERT is set")
	var timeout time.Duration
	durationVar(fs, &timeout, "timeout", 3*time.Second, "bound on the check")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: taskgate healthcheck [flags]\n\nGETs a path of taskgate's admin server; exit 0 on HTTP 200, else 1.\n\nFlags:\n")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return 0
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if v := getenv(envName("admin-listen")); err == nil && !set["admin-listen"] && v != "" {
		*admin = v
	}
	if err == nil && *admin == "" {
		err = errors.New("--admin-listen is empty: the admin server is disabled, nothing to check")
	}
	if err == nil {
		err = checkListen("--admin-listen", *admin)
	}
	if err != nil {
		fmt.Fprintf(stderr, "taskgate healthcheck: %v\n", err)
		return 2
	}
	host, port, _ := net.SplitHostPort(*admin)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	scheme, client := "http", http.DefaultClient
	if *useTLS || (!set["tls"] && getenv(envName("tls-cert")) != "") {
		scheme = "https"
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	}
	u := scheme + "://" + net.JoinHostPort(host, port) + *path
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		fmt.Fprintf(stderr, "taskgate healthcheck: %v\n", err)
		return 2
	}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "taskgate healthcheck: %s: %v\n", u, err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "taskgate healthcheck: %s: HTTP %d: %s", u, resp.StatusCode, body)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %s", u, body)
	return 0
}
