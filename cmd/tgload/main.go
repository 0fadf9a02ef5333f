// Command tgload is a load generator for taskgate and other MCP Streamable
// HTTP servers (the demo legacy-mcp, the mcp-go peer in cmd/mcpgo-peer). It
// runs N concurrent workers for a fixed time against one or more MCP
// endpoints and prints, per mode, the throughput, a latency histogram's
// p50/p90/p99/max and the errors.
//
// It is a development tool, not part of taskgate: it is not in the image. The
// measurements taken with it, and the commands that take them again, are in
// cmd/tgload/README.md.
//
// Each worker opens its own MCP session on every target (initialize, then
// notifications/initialized; --session shared opens one per target for all
// workers) and sends on every request
//
//	Content-Type: application/json
//	Accept: application/json, text/event-stream   (tasks/result: --result-accept)
//	MCP-Protocol-Version: 2025-11-25               (--protocol-version)
//	Mcp-Session-Id: <the session's id, if the server gave one>
//	Authorization: Bearer load-<worker>             (--auth-prefix; "" sends none)
//
// so that, behind taskgate, every worker is its own task owner. Answers may be
// JSON or SSE; each is checked (HTTP status, JSON-RPC id, no error, the fields
// the mode expects) and anything else counts as an error, by kind.
//
// Modes (--mode takes a comma list; they run one after the other):
//
//	call           tools/call of --tool with --args, no task: pass-through cost
//	create         the same call with params.task: time to CreateTaskResult
//	get            each worker first creates --tasks tasks (not measured), then
//	               tasks/get on them round-robin
//	create-result  per iteration: task-augmented call, then a blocking
//	               tasks/result (Accept: --result-accept, default
//	               application/json); the summary line is the iteration, the
//	               per-request figures follow
//	mixed          a weighted mix (--mix) of call, create, get, result, cancel,
//	               list and stream over all targets: a task created on target i
//	               is read, awaited or cancelled on target i+1, so with two
//	               taskgate replicas sharing a Redis (and an --owner-key) every
//	               task crosses replicas. cancel creates a --slow-tool task and
//	               cancels it at once (the answer must say "cancelled"); stream
//	               creates a short slow task with a progressToken and awaits it
//	               with an SSE tasks/result.
//
// --era 2026 runs the modes (all but mixed) on the MCP 2026-07-28 wire
// instead: no initialize and no session; every request carries
// _meta["io.modelcontextprotocol/protocolVersion"] and
// _meta["io.modelcontextprotocol/clientCapabilities"] and the headers
// MCP-Protocol-Version: 2026-07-28, Mcp-Method and Mcp-Name. Task calls
// declare the extension io.modelcontextprotocol/tasks in the capabilities;
// the answer is a CreateTaskResult (resultType "task"), or the tool's result
// when the call ended before the server made it a task (taskgate's
// --promote-window; counted as "inline"). create-result then polls tasks/get
// until the task is completed, its result inline, waiting the pollIntervalMs
// the server reports between polls (or --poll-interval); get needs calls
// that become tasks. --era 2025,2026 runs every mode on both wires, one
// after the other; with --compare, every endpoint is measured in both eras
// in each round (targets name/2025 and name/2026), so one endpoint suffices:
//
//	tgload --mode create-result --era 2025,2026 --compare taskgate=http://127.0.0.1:8080/mcp
//
// Each mode runs --warmup (not recorded), then --duration. Latencies and
// errors cover every request started inside that window (workers finish the
// request they are in, up to --timeout); throughput counts those that also
// ended inside it. Task-augmented calls carry
// "task":{"ttl":--ttl}. --cpu name=pid,... reports the CPU (in cores) each
// process used during the window, read from /proc/<pid>/stat, next to
// tgload's own.
//
// Output: one line per mode, e.g.
//
//	mode=call c=16 dur=15s n=152342 rps=10156.1 p50=1.41ms p90=2.31ms p99=4.02ms max=18.3ms errors=0 cpu=tgload:0.71
//
// (plus one indented line per request kind for create-result and mixed);
// --json prints one JSON object per mode instead.
//
// Examples:
//
//	# pass-through, 16 workers, 15 s, against taskgate
//	tgload --url http://127.0.0.1:8080/mcp --mode call -c 16 --duration 15s
//
//	# tasks: creation, polling, create + blocking result, as JSON lines
//	tgload --url http://127.0.0.1:8080/mcp --mode create,get,create-result -c 32 --duration 15s --json
//
//	# the 10-minute soak against two taskgate replicas sharing one Redis:
//	redis-server --port 6390 --save "" --appendonly no &
//	legacy-mcp --listen 127.0.0.1:3000 &
//	taskgate --upstream http://127.0.0.1:3000/mcp --redis redis://127.0.0.1:6390 \
//	    --owner-key soak-owner-key-0123456789 --listen 127.0.0.1:8081 --admin-listen 127.0.0.1:9091 --log-level warn &
//	taskgate --upstream http://127.0.0.1:3000/mcp --redis redis://127.0.0.1:6390 \
//	    --owner-key soak-owner-key-0123456789 --listen 127.0.0.1:8082 --admin-listen 127.0.0.1:9092 --log-level warn &
//	tgload --mode mixed --url http://127.0.0.1:8081/mcp,http://127.0.0.1:8082/mcp \
//	    -c 32 --warmup 5s --duration 10m --report 30s --cpu tg1=PID1,tg2=PID2 --json
//
// --compare measures endpoints side by side instead: each of --rounds rounds
// runs the mode against every endpoint in turn (rotating which goes first),
// and the summary gives, per endpoint, the medians over the rounds and, for
// every endpoint after the first, the median ratio of its throughput to the
// first's in the same round and the added p50/p99. This is the pass-through
// overhead measurement of cmd/tgload/README.md:
//
//	tgload --mode call -c 16 --rounds 20 --duration 2s --warmup 500ms \
//	    --compare direct=http://127.0.0.1:3000/mcp,taskgate=http://127.0.0.1:8080/mcp \
//	    --cpu upstream=UPSTREAM_PID,taskgate=TASKGATE_PID
//
// --report prints a progress line (iterations and rate) to stderr at that
// interval, which a long soak needs to show drift. tgload exits 0 when every
// request succeeded, 3 when some failed (the error kinds are printed), 1 when
// a session or the get mode's tasks could not be set up, 2 on bad flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tgload:", err)
		os.Exit(2)
	}
	stop := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { <-sig; close(stop) }()
	if cfg.compare != nil {
		os.Exit(compareMain(cfg, stop))
	}
	failed := false
	for i, mode := range cfg.modes {
		for j, era := range cfg.eras {
			c := *cfg
			c.era = era
			res, err := runMode(&c, mode, stop)
			if err != nil {
				fmt.Fprintf(os.Stderr, "tgload: mode %s%s: %v\n", mode, eraSuffix(era), err)
				os.Exit(1)
			}
			res.print(os.Stdout, cfg.jsonOut)
			if res.Errors > 0 {
				failed = true
			}
			select {
			case <-stop:
				os.Exit(130)
			default:
			}
			if i < len(cfg.modes)-1 || j < len(cfg.eras)-1 {
				time.Sleep(500 * time.Millisecond)
			}
		}
	}
	if failed {
		os.Exit(3)
	}
}
