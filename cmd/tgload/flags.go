package main

// The command line: flags, their checks, the parsed config.

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// usageNote heads --help: what the program is, and that it is a
// development tool.
const usageNote = "a load generator for taskgate and other MCP Streamable HTTP servers (modes: go doc ./cmd/tgload;\n" +
	"measurements and the commands behind them: cmd/tgload/README.md). A development tool of taskgate, not part of the product."

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
	redis         []namedAddr
	compare       []compareTarget // --compare: endpoints measured side by side
	rounds        int
	eras          []string      // --era: the wires each mode runs on, in order
	era           string        // the wire of the run at hand: era2025 or era2026
	pollInterval  time.Duration // 2026 create-result: wait between tasks/get polls; 0: the server's pollIntervalMs
}

type namedPID struct {
	name string
	pid  int
}

func parseFlags(argv []string, out io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("tgload", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "tgload: %s\n\nUsage of tgload:\n", usageNote)
		fs.PrintDefaults()
	}
	var redisList string
	var modeList, urlList, args, mix, cpu, session, cancelArgs, streamArgs, compare, eraList string
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
	fs.StringVar(&cpu, "cpu", "", "comma list of name=pid whose CPU use during the window is reported; a name given several pids (name=pid+pid+pid, or repeated) reports their sum, e.g. a whole server side: taskgate, its upstream and its redis-server")
	fs.StringVar(&redisList, "redis", "", "comma list of name=host:port of redis-servers whose INFO commandstats delta over the window is reported per operation (commands and their time as Redis counts them)")
	fs.StringVar(&compare, "compare", "", "comma list of name=URL measured side by side in alternating rounds (instead of --url); the first is the baseline of the ratios")
	fs.StringVar(&eraList, "era", "2025", "comma list of protocol eras each mode runs on, one after the other (with --compare: every endpoint in each era, every round): "+
		"2025 (2025-11-25: sessions, params.task, blocking tasks/result) or 2026 (2026-07-28: stateless, the tasks extension, tasks/get polled until complete)")
	fs.DurationVar(&c.pollInterval, "poll-interval", 0, "--era 2026, create-result: wait between tasks/get polls of a task; 0 = the pollIntervalMs the server reports")
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
	for _, e := range splitList(eraList) {
		switch e {
		case "2025", "2025-11-25":
			e = era2025
		case "2026", era2026:
			e = era2026
		default:
			return nil, fmt.Errorf("--era %q: want 2025 or 2026", e)
		}
		if slices.Contains(c.eras, e) {
			return nil, fmt.Errorf("--era: %s twice", e)
		}
		c.eras = append(c.eras, e)
	}
	if len(c.eras) == 0 {
		return nil, errors.New("--era: empty")
	}
	c.era = c.eras[0]
	if slices.Contains(c.eras, era2026) && slices.Contains(c.modes, "mixed") {
		return nil, errors.New("--era 2026: the mixed mode runs on the 2025 wire only")
	}
	if compare != "" {
		urlSet := false
		fs.Visit(func(f *flag.Flag) { urlSet = urlSet || f.Name == "url" })
		if urlSet {
			return nil, errors.New("--compare and --url: give one of them")
		}
		var err error
		if c.compare, err = parseCompare(compare, c.eras); err != nil {
			return nil, err
		}
		if c.rounds <= 0 {
			return nil, errors.New("--rounds must be positive")
		}
	}
	if len(c.urls) == 0 {
		return nil, errors.New("--url: empty")
	}
	if c.pollInterval < 0 {
		return nil, errors.New("--poll-interval must not be negative")
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
		name, ps, ok := strings.Cut(kv, "=")
		for _, p := range strings.Split(ps, "+") {
			pid, err := strconv.Atoi(p)
			if !ok || err != nil || pid <= 0 {
				return nil, fmt.Errorf("--cpu %q: want name=pid or name=pid+pid...", kv)
			}
			c.cpu = append(c.cpu, namedPID{name, pid})
		}
	}
	for _, kv := range splitList(redisList) {
		name, addr, ok := strings.Cut(kv, "=")
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("--redis %q: want name=host:port", kv)
		}
		c.redis = append(c.redis, namedAddr{name, addr})
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
