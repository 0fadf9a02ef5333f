package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/taskgate/taskgate/taskstore"
)

// durationValue is a time.Duration flag whose error says the expected form.
type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration: give a number with a unit, e.g. 30s, 5m or 1h30m", s)
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) String() string { return time.Duration(*d).String() }

func (d *durationValue) Get() any { return time.Duration(*d) }

// durationVar defines a duration flag with the default def.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var((*durationValue)(p), name, usage)
}

// envValueError explains why the value v of the environment variable for
// flag f was refused, naming the form the flag wants.
func envValueError(f *flag.Flag, v string, err error) error {
	env := envName(f.Name)
	var want string
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case bool:
			want = "true or false"
		case int, int64, uint, uint64:
			want = "an integer"
		case float64:
			want = "a number"
		case time.Duration, sizeValue:
			return fmt.Errorf("%s: %w", env, err)
		}
	}
	if want != "" {
		return fmt.Errorf("%s=%q: not %s", env, v, want)
	}
	return fmt.Errorf("%s=%q: %w", env, v, err)
}

// printUsage writes --help: what taskgate is, how to call it and every flag
// with its environment variable and default.
func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s: MCP tasks for MCP servers that lack them.\n\n", versionString())
	fmt.Fprintf(w, "Usage:\n  taskgate --upstream URL [flags]\n  taskgate --upstream-command 'PROGRAM ARGS...' [flags]\n  taskgate version | --version\n"+
		"  taskgate healthcheck [--admin-listen ADDR] [--path /healthz|/readyz|/readyz/store] [--tls]\n"+
		"  taskgate tasks list|get ID|cancel ID [flags]   (operators; taskgate tasks --help)\n"+
		"  taskgate reload [--admin-listen ADDR]          (re-read --config in a running taskgate)\n\n"+
		"taskgate reloads --config and the --tls-* files when they change on disk, and --config\n"+
		"on SIGHUP or POST /admin/v1/reload (a file with an error is refused and the previous one\n"+
		"kept); on SIGTERM or SIGINT it drains (--drain-delay: /readyz 503, still serving) and shuts\n"+
		"down gracefully.\n"+
		"Exit status: 0 done, 1 a failure while running (e.g. a port in use), 2 a bad flag or value.\n\n"+
		"Flags (each also settable as the environment variable shown):\n")
	fs.VisitAll(func(f *flag.Flag) {
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			def = " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(w, "  --%s  [%s]\n      %s%s\n", f.Name, envName(f.Name), f.Usage, def)
	})
}

// checkListen validates a host:port listen address without binding it.
func checkListen(flagName, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		if n, perr := strconv.Atoi(port); perr != nil || n < 0 || n > 65535 {
			err = fmt.Errorf("port %q is not a number from 0 to 65535", port)
		}
	}
	if err == nil && strings.ContainsAny(host, "/ ") {
		err = fmt.Errorf("host %q is not a host name or IP address", host)
	}
	if err != nil {
		hint := "e.g. 127.0.0.1:8080, 0.0.0.0:8080 or :8080"
		if _, perr := strconv.Atoi(addr); perr == nil {
			hint = "did you mean :" + addr + "?"
		}
		return fmt.Errorf("%s %q: want host:port (%s): %v", flagName, addr, hint, err)
	}
	return nil
}

// checkUpstream validates --upstream's form, suggesting http:// when the
// scheme is missing. It returns a warning for an upstream without a path.
func checkUpstream(raw string) (warning string, err error) {
	if !strings.Contains(raw, "://") {
		return "", fmt.Errorf("--upstream %q is not a URL: did you mean http://%s?", raw, raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("--upstream %q: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("--upstream %q: the scheme must be http or https", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("--upstream %q: no host", raw)
	}
	if u.Path == "" {
		return fmt.Sprintf("--upstream %s has no path: taskgate adds tasks only to POSTs to / and passes every other path "+
			"(such as /mcp) through unchanged; give the MCP endpoint, e.g. %s/mcp", raw, raw), nil
	}
	return "", nil
}

// checkRedisURL validates --redis without connecting, suggesting redis://
// when the scheme is missing.
func checkRedisURL(raw string) error {
	if !strings.Contains(raw, "://") {
		if i := strings.LastIndexByte(raw, '@'); i >= 0 {
			raw = "<redacted>" + raw[i:] // never echo a password
		}
		return fmt.Errorf("--redis %q is not a URL: did you mean redis://%s?", raw, raw)
	}
	rdb, err := taskstore.Open(raw)
	if err != nil {
		return fmt.Errorf("--redis: %w", err)
	}
	return rdb.Close()
}

// listenExit is the exit status for a failed listen: 1 when the address is
// in use (a failure of the moment: another process holds it), 2 when the
// address itself cannot work here (not an address of this machine, a port
// the user may not bind, a host that does not resolve).
func listenExit(err error) int {
	if errors.Is(err, syscall.EADDRINUSE) {
		return 1
	}
	return 2
}
