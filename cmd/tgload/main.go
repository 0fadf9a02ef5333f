// Command tgload is a load generator for taskgate and other MCP Streamable
// HTTP servers (the demo legacy-mcp, the mcp-go peer in cmd/mcpgo-peer). It
// runs N concurrent workers for a fixed time against one or more MCP
// endpoints and prints, per mode, the throughput, a latency histogram's
// p50/p90/p99/max and the errors.
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
// overhead measurement of taskgate's README:
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
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// Request kinds, each with its own histogram.
type op int

const (
	opIter op = iota // one iteration of the mode (the summary line)
	opCall
	opCreate
	opGet
	opResult
	opCancel
	opList
	opStream
	numOps
)

var opNames = [numOps]string{"iter", "call", "create", "get", "result", "cancel", "list", "stream"}

func opByName(s string) (op, bool) {
	for i, n := range opNames {
		if n == s && i != int(opIter) {
			return op(i), true
		}
	}
	return 0, false
}

var modes = []string{"call", "create", "get", "create-result", "mixed"}

// config is the parsed command line.
type config struct {
	modes         []string
	urls          []string
	conc          int
	duration      time.Duration
	warmup        time.Duration
	timeout       time.Duration
	report        time.Duration
	tool          string
	args          []byte
	ttl           int64
	tasks         int
	sharedSession bool
	resultAccept  string
	authPrefix    string
	protoVersion  string
	slowTool      string
	cancelArgs    []byte
	streamArgs    []byte
	mix           [numOps]int
	mixTotal      int
	jsonOut       bool
	label         string
	cpu           []namedPID
	compare       []compareTarget // --compare: endpoints measured side by side
	rounds        int
}

type namedPID struct {
	name string
	pid  int
}

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
		res, err := runMode(cfg, mode, stop)
		if err != nil {
			fmt.Fprintf(os.Stderr, "tgload: mode %s: %v\n", mode, err)
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
		if i < len(cfg.modes)-1 {
			time.Sleep(500 * time.Millisecond)
		}
	}
	if failed {
		os.Exit(3)
	}
}

func parseFlags(argv []string, out io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("tgload", flag.ContinueOnError)
	fs.SetOutput(out)
	var modeList, urlList, args, mix, cpu, session, cancelArgs, streamArgs, compare string
	fs.StringVar(&modeList, "mode", "call", "comma list of modes: "+strings.Join(modes, ", "))
	fs.StringVar(&urlList, "url", "http://127.0.0.1:8080/mcp", "comma list of MCP endpoint URLs (workers and mixed-mode requests spread over them)")
	fs.IntVar(&c.conc, "c", 16, "concurrent workers")
	fs.IntVar(&c.conc, "concurrency", 16, "same as -c")
	fs.DurationVar(&c.duration, "duration", 15*time.Second, "measured time per mode")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "unrecorded time before each measurement")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "per-request timeout")
	fs.DurationVar(&c.report, "report", 0, "print a progress line to stderr at this interval (0: none)")
	fs.StringVar(&c.tool, "tool", "echo", "tool called by call, create, get, create-result and mixed")
	fs.StringVar(&args, "args", `{"text":"hello from tgload"}`, "arguments of --tool (a JSON object)")
	fs.Int64Var(&c.ttl, "ttl", 60000, "params.task.ttl of created tasks, in ms (get mode raises it to outlive the run)")
	fs.IntVar(&c.tasks, "tasks", 16, "get mode: tasks each worker creates before polling them")
	fs.StringVar(&session, "session", "worker", "worker: one MCP session per worker and target; shared: one per target")
	fs.StringVar(&c.resultAccept, "result-accept", "application/json", "Accept header of tasks/result in create-result and mixed result")
	fs.StringVar(&c.authPrefix, "auth-prefix", "load-", `Authorization is "Bearer <prefix><worker>"; empty: no Authorization header`)
	fs.StringVar(&c.protoVersion, "protocol-version", "2025-11-25", "protocol version asked in initialize and sent as MCP-Protocol-Version")
	fs.StringVar(&c.slowTool, "slow-tool", "slow", "long-running tool used by the mixed mode's cancel and stream")
	fs.StringVar(&cancelArgs, "cancel-args", `{"seconds":30}`, "arguments of --slow-tool for mixed cancel (must outlast the cancel)")
	fs.StringVar(&streamArgs, "stream-args", `{"seconds":0.3,"steps":3}`, "arguments of --slow-tool for mixed stream")
	fs.StringVar(&mix, "mix", "call=35,create=15,get=25,result=10,cancel=5,list=5,stream=5", "mixed mode weights")
	fs.BoolVar(&c.jsonOut, "json", false, "print one JSON object per mode instead of text")
	fs.StringVar(&c.label, "label", "", "label copied into the output")
	fs.StringVar(&cpu, "cpu", "", "comma list of name=pid whose CPU use during the window is reported")
	fs.StringVar(&compare, "compare", "", "comma list of name=URL measured side by side in alternating rounds (instead of --url); the first is the baseline of the ratios")
	fs.IntVar(&c.rounds, "rounds", 10, "--compare: rounds (each runs every endpoint once, for --warmup then --duration)")
	if err := fs.Parse(argv); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, m := range splitList(modeList) {
		if !slices.Contains(modes, m) {
			return nil, fmt.Errorf("--mode %q: want one of %s", m, strings.Join(modes, ", "))
		}
		c.modes = append(c.modes, m)
	}
	if len(c.modes) == 0 {
		return nil, errors.New("--mode: empty")
	}
	for _, u := range splitList(urlList) {
		if err := checkURL(u); err != nil {
			return nil, fmt.Errorf("--url %q: %w", u, err)
		}
		c.urls = append(c.urls, u)
	}
	if compare != "" {
		urlSet := false
		fs.Visit(func(f *flag.Flag) { urlSet = urlSet || f.Name == "url" })
		if urlSet {
			return nil, errors.New("--compare and --url: give one of them")
		}
		var err error
		if c.compare, err = parseCompare(compare); err != nil {
			return nil, err
		}
		if c.rounds <= 0 {
			return nil, errors.New("--rounds must be positive")
		}
	}
	if len(c.urls) == 0 {
		return nil, errors.New("--url: empty")
	}
	if c.conc <= 0 || c.duration <= 0 || c.timeout <= 0 || c.warmup < 0 || c.tasks <= 0 || c.ttl <= 0 {
		return nil, errors.New("-c, --duration, --timeout, --tasks, --ttl must be positive, --warmup not negative")
	}
	var err error
	if c.args, err = jsonObject("--args", args); err != nil {
		return nil, err
	}
	if c.cancelArgs, err = jsonObject("--cancel-args", cancelArgs); err != nil {
		return nil, err
	}
	if c.streamArgs, err = jsonObject("--stream-args", streamArgs); err != nil {
		return nil, err
	}
	switch session {
	case "worker":
	case "shared":
		c.sharedSession = true
	default:
		return nil, fmt.Errorf("--session %q: want worker or shared", session)
	}
	for _, kv := range splitList(mix) {
		name, w, ok := strings.Cut(kv, "=")
		o, known := opByName(strings.TrimSpace(name))
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if !ok || !known || err != nil || n < 0 {
			return nil, fmt.Errorf("--mix %q: want op=weight with op in call, create, get, result, cancel, list, stream", kv)
		}
		c.mix[o] = n
		c.mixTotal += n
	}
	if slices.Contains(c.modes, "mixed") && c.mixTotal == 0 {
		return nil, errors.New("--mix: all weights are zero")
	}
	for _, kv := range splitList(cpu) {
		name, p, ok := strings.Cut(kv, "=")
		pid, err := strconv.Atoi(p)
		if !ok || err != nil || pid <= 0 {
			return nil, fmt.Errorf("--cpu %q: want name=pid", kv)
		}
		c.cpu = append(c.cpu, namedPID{name, pid})
	}
	return c, nil
}

// checkURL accepts http(s)://host[:port][/path].
func checkURL(u string) error {
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return errors.New("want http(s)://host:port/path")
	}
	return nil
}

func jsonObject(flagName, s string) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object: %v", flagName, err)
	}
	b, _ := json.Marshal(m)
	return b, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// target is one MCP endpoint.
type target struct {
	url string
	hc  *fasthttp.HostClient
}

func newTarget(raw string, conns int, timeout time.Duration) *target {
	u, _ := url.Parse(raw) // validated in parseFlags
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	return &target{url: raw, hc: &fasthttp.HostClient{
		Addr:                     host,
		IsTLS:                    u.Scheme == "https",
		MaxConns:                 conns,
		MaxConnWaitTimeout:       timeout,
		MaxIdleConnDuration:      time.Minute,
		ReadTimeout:              timeout,
		WriteTimeout:             timeout,
		ReadBufferSize:           16 << 10,
		MaxResponseBodySize:      64 << 20,
		NoDefaultUserAgentHeader: true,
	}}
}

// session is one MCP session on a target.
type session struct {
	t  *target
	id string // Mcp-Session-Id; empty for stateless servers
}

// rpcMsg is a JSON-RPC message as far as tgload looks at it.
type rpcMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *rpcErr         `json:"error"`
}

type rpcErr struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// answer is the JSON-RPC answer to one request.
type answer struct {
	msg   rpcMsg
	notes int // other messages (notifications) seen before it on an SSE answer
	sse   bool
}

// loadErr is a failed request; kind names it in the error counts.
type loadErr struct {
	kind   string
	detail string
}

func (e *loadErr) Error() string { return e.kind + ": " + e.detail }

func errf(kind, format string, a ...any) *loadErr {
	return &loadErr{kind: kind, detail: fmt.Sprintf(format, a...)}
}

const acceptBoth = "application/json, text/event-stream"

// client holds one worker's reusable request state.
type client struct {
	cfg  *config
	auth string
	req  *fasthttp.Request
	resp *fasthttp.Response
	buf  []byte
	id   int64
}

func newClient(cfg *config, worker int) *client {
	c := &client{cfg: cfg, req: fasthttp.AcquireRequest(), resp: fasthttp.AcquireResponse()}
	if cfg.authPrefix != "" {
		c.auth = "Bearer " + cfg.authPrefix + strconv.Itoa(worker)
	}
	return c
}

func (c *client) nextID() int64 { c.id++; return c.id }

// post sends body (a request with id id, or a notification when id is 0)
// on s and returns its answer.
func (c *client) post(s *session, body []byte, id int64, accept string, initializing bool) (answer, error) {
	req, resp := c.req, c.resp
	req.Reset()
	resp.Reset()
	req.SetRequestURI(s.t.url)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Accept", accept)
	if !initializing {
		req.Header.Set("MCP-Protocol-Version", c.cfg.protoVersion)
	}
	if s.id != "" {
		req.Header.Set("Mcp-Session-Id", s.id)
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	req.SetBodyRaw(body)
	if err := s.t.hc.DoTimeout(req, resp, c.cfg.timeout); err != nil {
		kind := "transport"
		if errors.Is(err, fasthttp.ErrTimeout) {
			kind = "timeout"
		}
		return answer{}, errf(kind, "%v", err)
	}
	status := resp.StatusCode()
	if id == 0 {
		if status != fasthttp.StatusAccepted && status != fasthttp.StatusOK {
			return answer{}, errf("http-"+strconv.Itoa(status), "notification: %.200s", resp.Body())
		}
		return answer{}, nil
	}
	if status != fasthttp.StatusOK {
		return answer{}, errf("http-"+strconv.Itoa(status), "%.200s", resp.Body())
	}
	ct := resp.Header.ContentType()
	if bytes.HasPrefix(ct, []byte("text/event-stream")) {
		return parseSSE(resp.Body(), id)
	}
	var a answer
	if err := json.Unmarshal(resp.Body(), &a.msg); err != nil {
		return answer{}, errf("bad-json", "%v: %.200s", err, resp.Body())
	}
	if !idIs(a.msg.ID, id) {
		return answer{}, errf("bad-id", "want id %d, got %s", id, a.msg.ID)
	}
	return a, nil
}

func idIs(raw json.RawMessage, id int64) bool {
	var buf [24]byte
	return bytes.Equal(bytes.TrimSpace(raw), strconv.AppendInt(buf[:0], id, 10))
}

// parseSSE finds the answer to id in an SSE body, counting the other
// messages before it.
func parseSSE(body []byte, id int64) (answer, error) {
	a := answer{sse: true}
	var data []byte
	dispatch := func() (bool, error) {
		if len(data) == 0 {
			return false, nil
		}
		var m rpcMsg
		if err := json.Unmarshal(data, &m); err != nil {
			return false, errf("bad-json", "SSE data: %v: %.200s", err, data)
		}
		data = data[:0]
		if (m.Result != nil || m.Error != nil) && idIs(m.ID, id) {
			a.msg = m
			return true, nil
		}
		a.notes++
		return false, nil
	}
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			if done, err := dispatch(); done || err != nil {
				return a, err
			}
			continue
		}
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			v = bytes.TrimPrefix(v, []byte(" "))
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, v...)
		}
	}
	if done, err := dispatch(); done || err != nil {
		return a, err
	}
	return a, errf("no-answer", "SSE answer ended without the response to id %d", id)
}

// rpc sends a request and fails on a JSON-RPC error.
func (c *client) rpc(s *session, body []byte, id int64, accept string) (answer, error) {
	a, err := c.post(s, body, id, accept, false)
	if err != nil {
		return a, err
	}
	if a.msg.Error != nil {
		return a, errf("rpc"+strconv.Itoa(a.msg.Error.Code), "%s", a.msg.Error.Message)
	}
	if a.msg.Result == nil {
		return a, errf("no-result", "answer without result")
	}
	return a, nil
}

// initialize opens a session on t.
func (c *client) initialize(t *target) (*session, error) {
	s := &session{t: t}
	id := c.nextID()
	body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"tgload","version":"1"}}}`,
		id, c.cfg.protoVersion)
	a, err := c.post(s, body, id, acceptBoth, true)
	if err != nil {
		return nil, fmt.Errorf("initialize %s: %w", t.url, err)
	}
	if a.msg.Error != nil {
		return nil, fmt.Errorf("initialize %s: error %d %s", t.url, a.msg.Error.Code, a.msg.Error.Message)
	}
	var r struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := json.Unmarshal(a.msg.Result, &r); err != nil || r.ProtocolVersion != c.cfg.protoVersion {
		return nil, fmt.Errorf("initialize %s: protocolVersion %q, want %q", t.url, r.ProtocolVersion, c.cfg.protoVersion)
	}
	s.id = string(c.resp.Header.Peek("Mcp-Session-Id"))
	if _, err := c.post(s, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), 0, acceptBoth, false); err != nil {
		return nil, fmt.Errorf("notifications/initialized %s: %w", t.url, err)
	}
	return s, nil
}

// closeSession ends a session (DELETE), ignoring the outcome.
func (c *client) closeSession(s *session) {
	if s.id == "" {
		return
	}
	req, resp := c.req, c.resp
	req.Reset()
	resp.Reset()
	req.SetRequestURI(s.t.url)
	req.Header.SetMethod(fasthttp.MethodDelete)
	req.Header.Set("Mcp-Session-Id", s.id)
	req.Header.Set("MCP-Protocol-Version", c.cfg.protoVersion)
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	_ = s.t.hc.DoTimeout(req, resp, 5*time.Second)
}

// Request bodies.

func (c *client) callBody(id int64, tool string, args []byte, task bool, progress string) []byte {
	b := c.buf[:0]
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `,"method":"tools/call","params":{"name":`...)
	b = strconv.AppendQuote(b, tool)
	b = append(b, `,"arguments":`...)
	b = append(b, args...)
	if task {
		b = append(b, `,"task":{"ttl":`...)
		b = strconv.AppendInt(b, c.cfg.ttl, 10)
		b = append(b, '}')
	}
	if progress != "" {
		b = append(b, `,"_meta":{"progressToken":`...)
		b = strconv.AppendQuote(b, progress)
		b = append(b, '}')
	}
	b = append(b, "}}"...)
	c.buf = b
	return b
}

func (c *client) taskBody(id int64, method, taskID string) []byte {
	b := c.buf[:0]
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `,"method":"`...)
	b = append(b, method...)
	if taskID == "" {
		b = append(b, `","params":{}}`...)
	} else {
		b = append(b, `","params":{"taskId":`...)
		b = strconv.AppendQuote(b, taskID)
		b = append(b, "}}"...)
	}
	c.buf = b
	return b
}

// Operations. Each checks the answer's shape.

func (c *client) call(s *session) error {
	id := c.nextID()
	a, err := c.rpc(s, c.callBody(id, c.cfg.tool, c.cfg.args, false, ""), id, acceptBoth)
	if err != nil {
		return err
	}
	return checkToolResult(a.msg.Result)
}

func checkToolResult(r json.RawMessage) error {
	if !bytes.Contains(r, []byte(`"content"`)) {
		return errf("bad-result", "no content: %.200s", r)
	}
	if bytes.Contains(r, []byte(`"isError":true`)) {
		return errf("tool-error", "%.200s", r)
	}
	return nil
}

type taskInfo struct {
	TaskID string `json:"taskId"`
	Status string `json:"status"`
}

func (c *client) create(s *session, tool string, args []byte, progress string) (string, error) {
	id := c.nextID()
	a, err := c.rpc(s, c.callBody(id, tool, args, true, progress), id, acceptBoth)
	if err != nil {
		return "", err
	}
	var r struct {
		Task taskInfo `json:"task"`
	}
	if err := json.Unmarshal(a.msg.Result, &r); err != nil || r.Task.TaskID == "" {
		return "", errf("not-a-task", "CreateTaskResult expected: %.200s", a.msg.Result)
	}
	switch r.Task.Status {
	case "working", "completed", "input_required":
	default:
		return "", errf("bad-status", "created task is %q", r.Task.Status)
	}
	return r.Task.TaskID, nil
}

func (c *client) get(s *session, taskID string) (string, error) {
	id := c.nextID()
	a, err := c.rpc(s, c.taskBody(id, "tasks/get", taskID), id, acceptBoth)
	if err != nil {
		return "", err
	}
	var t taskInfo
	if err := json.Unmarshal(a.msg.Result, &t); err != nil || t.TaskID != taskID || t.Status == "" {
		return "", errf("bad-task", "tasks/get: %.200s", a.msg.Result)
	}
	return t.Status, nil
}

func (c *client) result(s *session, taskID, accept string) (answer, error) {
	id := c.nextID()
	a, err := c.rpc(s, c.taskBody(id, "tasks/result", taskID), id, accept)
	if err != nil {
		return a, err
	}
	return a, checkToolResult(a.msg.Result)
}

func (c *client) cancel(s *session, taskID string) error {
	id := c.nextID()
	a, err := c.rpc(s, c.taskBody(id, "tasks/cancel", taskID), id, acceptBoth)
	if err != nil {
		return err
	}
	var t taskInfo
	if err := json.Unmarshal(a.msg.Result, &t); err != nil || t.Status != "cancelled" {
		return errf("bad-cancel", "tasks/cancel: %.200s", a.msg.Result)
	}
	return nil
}

func (c *client) list(s *session) error {
	id := c.nextID()
	a, err := c.rpc(s, c.taskBody(id, "tasks/list", ""), id, acceptBoth)
	if err != nil {
		return err
	}
	if !bytes.Contains(a.msg.Result, []byte(`"tasks"`)) {
		return errf("bad-list", "tasks/list: %.200s", a.msg.Result)
	}
	return nil
}

// window is the measured interval of a mode.
type window struct {
	start, end time.Time
}

func (w window) startedIn(t time.Time) bool { return !t.Before(w.start) && t.Before(w.end) }

// taskRef is a task a worker created, for mixed mode.
type taskRef struct {
	id     string
	at     time.Time
	target int
}

// worker is one load worker.
type worker struct {
	n        int
	cfg      *config
	c        *client
	sessions []*session // per target
	win      *window
	rng      *rand.Rand
	rr       int

	hists    [numOps]hist   // requests started in the window
	done     [numOps]uint64 // of those, ended in the window too
	errs     map[string]uint64
	errCount uint64
	lastErr  string
	progress *atomic.Uint64 // completed iterations, for --report
	notes    uint64         // messages seen on stream answers before their result

	own    []string  // get mode: this worker's tasks
	recent []taskRef // mixed mode: recently created tasks (ring)
	next   int
}

// timed runs f and records its latency (or error) under o when it started
// inside the window; it counts towards throughput when it also ended there.
func (w *worker) timed(o op, f func() error) error {
	t0 := time.Now()
	err := f()
	w.account(o, t0, time.Now(), err)
	return err
}

func (w *worker) account(o op, t0, t1 time.Time, err error) {
	if !w.win.startedIn(t0) {
		return
	}
	if err != nil {
		kind := "other"
		var le *loadErr
		if errors.As(err, &le) {
			kind = le.kind
		}
		w.errs[opNames[o]+":"+kind]++
		w.errCount++
		w.lastErr = opNames[o] + ": " + err.Error()
		return
	}
	w.hists[o].record(t1.Sub(t0))
	if !t1.After(w.win.end) {
		w.done[o]++
		if o == opIter {
			w.progress.Add(1)
		}
	}
}

func (w *worker) session(i int) *session { return w.sessions[i%len(w.sessions)] }

// setup runs before the window: the get mode's tasks.
func (w *worker) setup(mode string) error {
	if mode != "get" {
		return nil
	}
	for range w.cfg.tasks {
		id, err := w.c.create(w.session(0), w.cfg.tool, w.cfg.args, "")
		if err != nil {
			return fmt.Errorf("creating the tasks to poll: %w", err)
		}
		w.own = append(w.own, id)
	}
	return nil
}

// iterate runs one iteration of mode.
func (w *worker) iterate(mode string) error {
	t0 := time.Now()
	var err error
	switch mode {
	case "call":
		err = w.timed(opCall, func() error { return w.c.call(w.session(0)) })
	case "create":
		err = w.timed(opCreate, func() error {
			_, err := w.c.create(w.session(0), w.cfg.tool, w.cfg.args, "")
			return err
		})
	case "get":
		taskID := w.own[w.next%len(w.own)]
		w.next++
		err = w.timed(opGet, func() error {
			st, err := w.c.get(w.session(0), taskID)
			if err == nil && st != "completed" && st != "working" {
				err = errf("bad-status", "polled task is %q", st)
			}
			return err
		})
	case "create-result":
		var taskID string
		err = w.timed(opCreate, func() error {
			var err error
			taskID, err = w.c.create(w.session(0), w.cfg.tool, w.cfg.args, "")
			return err
		})
		if err == nil {
			err = w.timed(opResult, func() error {
				_, err := w.c.result(w.session(0), taskID, w.cfg.resultAccept)
				return err
			})
		}
	case "mixed":
		err = w.mixed()
	}
	if err == nil {
		w.account(opIter, t0, time.Now(), nil)
	}
	return err
}

func (w *worker) pick() op {
	r := w.rng.IntN(w.cfg.mixTotal)
	for o := opCall; o < numOps; o++ {
		if r < w.cfg.mix[o] {
			return o
		}
		r -= w.cfg.mix[o]
	}
	return opCall
}

// recentTask returns a task created in the last ttl/2, or false.
func (w *worker) recentTask() (taskRef, bool) {
	if len(w.recent) == 0 {
		return taskRef{}, false
	}
	for range 4 {
		r := w.recent[w.rng.IntN(len(w.recent))]
		if time.Since(r.at) < time.Duration(w.cfg.ttl)*time.Millisecond/2 {
			return r, true
		}
	}
	return taskRef{}, false
}

func (w *worker) remember(id string, target int) {
	r := taskRef{id: id, at: time.Now(), target: target}
	if len(w.recent) < 128 {
		w.recent = append(w.recent, r)
		return
	}
	w.recent[w.next%len(w.recent)] = r
	w.next++
}

func (w *worker) mixed() error {
	o := w.pick()
	t := w.rr
	w.rr++
	other := (t + 1) % len(w.sessions)
	if o == opGet || o == opResult {
		r, ok := w.recentTask()
		if !ok {
			o = opCreate
		} else {
			t, other = r.target, (r.target+1)%len(w.sessions)
			if o == opGet {
				return w.timed(opGet, func() error {
					_, err := w.c.get(w.session(other), r.id)
					return err
				})
			}
			return w.timed(opResult, func() error {
				_, err := w.c.result(w.session(other), r.id, w.cfg.resultAccept)
				return err
			})
		}
	}
	switch o {
	case opCall:
		return w.timed(opCall, func() error { return w.c.call(w.session(t)) })
	case opCreate:
		return w.timed(opCreate, func() error {
			id, err := w.c.create(w.session(t), w.cfg.tool, w.cfg.args, "")
			if err == nil {
				w.remember(id, t%len(w.sessions))
			}
			return err
		})
	case opList:
		return w.timed(opList, func() error { return w.c.list(w.session(t)) })
	case opCancel:
		var id string
		if err := w.timed(opCreate, func() error {
			var err error
			id, err = w.c.create(w.session(t), w.cfg.slowTool, w.cfg.cancelArgs, "")
			return err
		}); err != nil {
			return err
		}
		return w.timed(opCancel, func() error { return w.c.cancel(w.session(other), id) })
	case opStream:
		var id string
		if err := w.timed(opCreate, func() error {
			var err error
			id, err = w.c.create(w.session(t), w.cfg.slowTool, w.cfg.streamArgs, "p-"+strconv.FormatInt(w.c.id, 10))
			return err
		}); err != nil {
			return err
		}
		return w.timed(opStream, func() error {
			a, err := w.c.result(w.session(other), id, acceptBoth)
			w.notes += uint64(a.notes)
			return err
		})
	}
	return nil
}

func (w *worker) run(mode string, begin <-chan struct{}, stop <-chan struct{}) {
	<-begin
	for {
		select {
		case <-stop:
			return
		default:
		}
		if !time.Now().Before(w.win.end) {
			return
		}
		if err := w.iterate(mode); err != nil {
			var le *loadErr
			if errors.As(err, &le) && (le.kind == "transport" || le.kind == "timeout") {
				time.Sleep(5 * time.Millisecond) // do not spin on a dead target
			}
		}
	}
}

// result is one mode's outcome.
type result struct {
	Mode        string             `json:"mode"`
	Label       string             `json:"label,omitempty"`
	Targets     []string           `json:"targets"`
	Concurrency int                `json:"concurrency"`
	DurationS   float64            `json:"duration_s"`
	Requests    uint64             `json:"n"`
	RPS         float64            `json:"rps"`
	P50ms       float64            `json:"p50_ms"`
	P90ms       float64            `json:"p90_ms"`
	P99ms       float64            `json:"p99_ms"`
	MaxMs       float64            `json:"max_ms"`
	MeanMs      float64            `json:"mean_ms"`
	Errors      uint64             `json:"errors"`
	ErrorKinds  map[string]uint64  `json:"error_kinds,omitempty"`
	LastError   string             `json:"last_error,omitempty"`
	Ops         map[string]opStats `json:"ops,omitempty"`
	StreamNotes uint64             `json:"stream_notifications,omitempty"`
	CPU         map[string]float64 `json:"cpu_cores,omitempty"`
}

type opStats struct {
	N     uint64  `json:"n"`
	RPS   float64 `json:"rps"`
	P50ms float64 `json:"p50_ms"`
	P90ms float64 `json:"p90_ms"`
	P99ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func runMode(cfg *config, mode string, stop <-chan struct{}) (*result, error) {
	targets := make([]*target, len(cfg.urls))
	for i, u := range cfg.urls {
		targets[i] = newTarget(u, cfg.conc+16, cfg.timeout)
	}
	if mode == "get" {
		// The polled tasks must outlive warm-up and measurement.
		need := (cfg.warmup + cfg.duration + time.Minute).Milliseconds()
		if cfg.ttl < need {
			c2 := *cfg
			c2.ttl = need
			cfg = &c2
		}
	}
	win := &window{}
	var progress atomic.Uint64
	workers := make([]*worker, cfg.conc)
	var shared []*session
	if cfg.sharedSession {
		c := newClient(cfg, 0)
		for _, t := range targets {
			s, err := c.initialize(t)
			if err != nil {
				return nil, err
			}
			shared = append(shared, s)
		}
	}
	var wg sync.WaitGroup
	setupErrs := make([]error, cfg.conc)
	for i := range workers {
		w := &worker{n: i, cfg: cfg, c: newClient(cfg, i), win: win, errs: map[string]uint64{},
			rng: rand.New(rand.NewPCG(uint64(i)+1, uint64(time.Now().UnixNano()))), progress: &progress,
			rr: i}
		workers[i] = w
		wg.Go(func() {
			if shared != nil {
				w.sessions = shared
			} else {
				for _, t := range targets {
					s, err := w.c.initialize(t)
					if err != nil {
						setupErrs[i] = err
						return
					}
					w.sessions = append(w.sessions, s)
				}
			}
			// Spread the workers' first target over the targets.
			if len(w.sessions) > 1 && shared == nil {
				k := i % len(w.sessions)
				w.sessions = append(w.sessions[k:], w.sessions[:k]...)
			}
			setupErrs[i] = w.setup(mode)
		})
	}
	wg.Wait()
	if err := errors.Join(setupErrs...); err != nil {
		return nil, err
	}

	now := time.Now()
	win.start = now.Add(cfg.warmup)
	win.end = win.start.Add(cfg.duration)
	begin := make(chan struct{})
	for _, w := range workers {
		wg.Go(func() { w.run(mode, begin, stop) })
	}
	close(begin)

	// CPU accounting over the window, and progress reports.
	cpuStart := map[string]float64{}
	var cpuEnd map[string]float64
	var selfStart float64
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-time.After(time.Until(win.start)):
		case <-stop:
			return
		}
		cpuStart = readCPU(cfg.cpu)
		selfStart = selfCPU()
		var tick <-chan time.Time
		if cfg.report > 0 {
			tk := time.NewTicker(cfg.report)
			defer tk.Stop()
			tick = tk.C
		}
		last, lastAt := uint64(0), win.start
		endT := time.NewTimer(time.Until(win.end))
		defer endT.Stop()
		for {
			select {
			case <-endT.C:
				cpuEnd = readCPU(cfg.cpu)
				cpuEnd["tgload"] = selfCPU()
				return
			case <-stop:
				return
			case t := <-tick:
				n := progress.Load()
				fmt.Fprintf(os.Stderr, "tgload: %s %s: %d iterations, %.1f/s in the last %s\n",
					mode, t.Sub(win.start).Round(time.Second), n, float64(n-last)/t.Sub(lastAt).Seconds(), t.Sub(lastAt).Round(time.Second))
				last, lastAt = n, t
			}
		}
	}()
	wg.Wait()
	<-done

	// Close sessions (DELETE), best effort.
	if shared != nil {
		c := newClient(cfg, 0)
		for _, s := range shared {
			c.closeSession(s)
		}
	} else {
		for _, w := range workers {
			wg.Go(func() {
				for _, s := range w.sessions {
					w.c.closeSession(s)
				}
			})
		}
		wg.Wait()
	}

	elapsed := cfg.duration
	if t := time.Now(); t.Before(win.end) { // interrupted
		elapsed = max(t.Sub(win.start), time.Millisecond)
	}
	res := &result{Mode: mode, Label: cfg.label, Targets: cfg.urls, Concurrency: cfg.conc,
		DurationS: elapsed.Seconds(), ErrorKinds: map[string]uint64{}}
	var all [numOps]hist
	var fin [numOps]uint64
	for _, w := range workers {
		for o := range numOps {
			all[o].merge(&w.hists[o])
			fin[o] += w.done[o]
		}
		for k, v := range w.errs {
			res.ErrorKinds[k] += v
		}
		res.Errors += w.errCount
		if w.lastErr != "" {
			res.LastError = w.lastErr
		}
		res.StreamNotes += w.notes
	}
	it := &all[opIter]
	res.Requests = it.n
	res.RPS = float64(fin[opIter]) / elapsed.Seconds()
	res.P50ms, res.P90ms, res.P99ms = ms(it.quantile(.5)), ms(it.quantile(.9)), ms(it.quantile(.99))
	res.MaxMs, res.MeanMs = ms(time.Duration(it.max)), ms(it.mean())
	if mode == "create-result" || mode == "mixed" {
		res.Ops = map[string]opStats{}
		for o := opCall; o < numOps; o++ {
			h := &all[o]
			if h.n == 0 {
				continue
			}
			res.Ops[opNames[o]] = opStats{N: h.n, RPS: float64(fin[o]) / elapsed.Seconds(),
				P50ms: ms(h.quantile(.5)), P90ms: ms(h.quantile(.9)), P99ms: ms(h.quantile(.99)), MaxMs: ms(time.Duration(h.max))}
		}
	}
	if cpuEnd != nil {
		res.CPU = map[string]float64{}
		secs := cfg.duration.Seconds()
		for k, v := range cpuEnd {
			if k == "tgload" {
				res.CPU[k] = round2((v - selfStart) / secs)
			} else if s, ok := cpuStart[k]; ok {
				res.CPU[k] = round2((v - s) / secs)
			}
		}
	}
	if len(res.ErrorKinds) == 0 {
		res.ErrorKinds = nil
	}
	return res, nil
}

func round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }

func (r *result) print(out io.Writer, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(r)
		fmt.Fprintf(out, "%s\n", b)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "mode=%s", r.Mode)
	if r.Label != "" {
		fmt.Fprintf(&b, " label=%s", r.Label)
	}
	if len(r.Targets) > 1 {
		fmt.Fprintf(&b, " targets=%d", len(r.Targets))
	}
	fmt.Fprintf(&b, " c=%d dur=%.0fs n=%d rps=%.1f p50=%s p90=%s p99=%s max=%s errors=%d",
		r.Concurrency, r.DurationS, r.Requests, r.RPS, fmtMs(r.P50ms), fmtMs(r.P90ms), fmtMs(r.P99ms), fmtMs(r.MaxMs), r.Errors)
	if len(r.CPU) > 0 {
		fmt.Fprintf(&b, " cpu=%s", fmtNamed(r.CPU, 2))
	}
	fmt.Fprintln(out, b.String())
	names := make([]string, 0, len(r.Ops))
	for k := range r.Ops {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		a, _ := opByName(names[i])
		b, _ := opByName(names[j])
		return a < b
	})
	for _, k := range names {
		o := r.Ops[k]
		fmt.Fprintf(out, "  op=%s n=%d rps=%.1f p50=%s p90=%s p99=%s max=%s\n",
			k, o.N, o.RPS, fmtMs(o.P50ms), fmtMs(o.P90ms), fmtMs(o.P99ms), fmtMs(o.MaxMs))
	}
	if r.Errors > 0 {
		keys := make([]string, 0, len(r.ErrorKinds))
		for k := range r.ErrorKinds {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s=%d", k, r.ErrorKinds[k])
		}
		fmt.Fprintf(out, "  errors: %s; last: %.300s\n", strings.Join(parts, " "), r.LastError)
	}
	if r.StreamNotes > 0 {
		fmt.Fprintf(out, "  stream notifications received: %d\n", r.StreamNotes)
	}
}

// fmtNamed formats m as name:value pairs sorted by name, values with prec
// decimals.
func fmtNamed(m map[string]float64, prec int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%.*f", k, prec, m[k])
	}
	return strings.Join(parts, ",")
}

func fmtMs(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0fms", v)
	case v >= 10:
		return fmt.Sprintf("%.1fms", v)
	default:
		return fmt.Sprintf("%.2fms", v)
	}
}

// readCPU returns the user+system CPU seconds of each process.
func readCPU(ps []namedPID) map[string]float64 {
	out := map[string]float64{}
	for _, p := range ps {
		if v, ok := procCPU(p.pid); ok {
			out[p.name] = v
		}
	}
	return out
}

// clkTck is USER_HZ, 100 on every Linux architecture Go supports.
const clkTck = 100

func procCPU(pid int) (float64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// Fields after the command (which may hold spaces) start after ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return float64(ut+st) / clkTck, true
}
