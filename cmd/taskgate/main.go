// Command taskgate is a reverse proxy that adds the MCP 2025-11-25 tasks
// feature to an MCP server that speaks Streamable HTTP but has no tasks.
//
// Usage:
//
//	taskgate --upstream http://127.0.0.1:3000/mcp [flags]
//	taskgate --upstream-command 'npx -y @modelcontextprotocol/server-memory' [flags]
//	taskgate version | --version
//	taskgate healthcheck [--admin-listen ADDR] [--path /readyz]
//	taskgate tasks list|get ID|cancel ID [--json]
//	taskgate reload
//
// Every flag can also be set through the environment variable named in
// --help (TASKGATE_ + the flag in upper case with '-' as '_'); a flag given
// on the command line wins.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func versionString() string {
	v := version
	if v == "" {
		v = "devel"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
	}
	return "taskgate " + v
}

// run is the whole command: a subcommand, or the proxy configured by the
// flags, served until a signal. It returns the exit status: 0 done, 2 a bad
// flag or file, 1 a failure of the environment (a port in use, a server
// that stopped).
func run(args []string, stdout, stderr io.Writer) int {
	if cmd, ok := subcommand(args); ok {
		return cmd(args[1:], stdout, stderr, os.Getenv)
	}
	o, code := parseCommandLine(args, stdout, stderr)
	if o == nil {
		return code
	}
	return serve(o, stderr)
}

// subcommand returns the subcommand args name, if they name one.
func subcommand(args []string) (func(args []string, stdout, stderr io.Writer, getenv func(string) string) int, bool) {
	if len(args) == 0 {
		return nil, false
	}
	switch args[0] {
	case "version", "--version", "-version":
		return func(_ []string, stdout, _ io.Writer, _ func(string) string) int {
			fmt.Fprintln(stdout, versionString())
			return 0
		}, true
	case "healthcheck":
		return healthcheck, true
	case "tasks":
		return tasksCommand, true
	case "reload":
		return reloadCommand, true
	}
	return nil, false
}

// parseCommandLine parses the flags and the TASKGATE_* variables. On
// --help (printed to stdout) or a bad flag (printed to stderr with a hint)
// it returns nil options and the exit status.
func parseCommandLine(args []string, stdout, stderr io.Writer) (*options, int) {
	o, err := parseArgs(args, stdout, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return nil, 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "taskgate: %v\n(taskgate --help lists the flags)\n", err)
		return nil, 2
	}
	return o, 0
}

// serve runs the proxy configured by o until SIGTERM or SIGINT (or a
// failure), then drains, shuts down and tears down what it started. It
// returns the exit status.
func serve(o *options, stderr io.Writer) int {
	g := &gateway{o: o}
	// From here on everything for stderr goes through g.lw, in order.
	g.setupProcess(stderr)
	defer g.lw.Close()
	g.warnUnknownEnv(os.Environ())
	// SIGHUP is caught from the start: its default action would end the
	// process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	defer g.teardown()
	if err := g.start(); err != nil {
		return g.startFailed(err)
	}
	code := g.wait(hup)
	g.shutdown()
	return code
}
