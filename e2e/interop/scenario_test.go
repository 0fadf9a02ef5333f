package interop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"
)

// The interop scenario for the Go clients: the same steps, in the same
// order and with the same output shape, as testdata/scenario.mjs runs for
// the JavaScript clients. A run's output is a JSON object with a key per
// step, each {"ok": bool, "error": {...}, ...}; runOut is its decoded form.
type runOut map[string]map[string]any

// stepTimeout bounds one step of a run (as STEP_TIMEOUT_MS in scenario.mjs).
const stepTimeout = 20 * time.Second

// elicitAnswer is what every client answers to an elicitation.
var elicitAnswer = map[string]any{"answer": "yes"}

// rpcError is a JSON-RPC error a Go client returned, with its code.
type rpcError struct {
	code int
	msg  string
}

func (e *rpcError) Error() string { return fmt.Sprintf("JSON-RPC error %d: %s", e.code, e.msg) }

type toolInfo struct {
	name, taskSupport string
}

// adapter is one Go client connected to one target. Results are the
// tool result as JSON (decoded into a map); JSON-RPC errors are *rpcError.
type adapter interface {
	connect(ctx context.Context) (server, protocolVersion string, err error)
	listTools(ctx context.Context) ([]toolInfo, error)
	call(ctx context.Context, name string, args map[string]any, onProgress func()) (map[string]any, error)
	// hasTasks says whether callTask and startTask work (the client can
	// make task-augmented calls); taskProgress, whether it sees a task's progress.
	hasTasks() bool
	taskProgress() bool
	callTask(ctx context.Context, name string, args map[string]any, onProgress func()) (map[string]any, error)
	startTask(ctx context.Context, name string, args map[string]any) (stop func() error, err error)
	asked() int
	close()
}

// normalize keeps what two runs must agree on: content, structuredContent, isError.
func normalize(r map[string]any) map[string]any {
	if r == nil {
		return nil
	}
	out := map[string]any{"content": r["content"]}
	if out["content"] == nil {
		out["content"] = []any{}
	}
	if sc, ok := r["structuredContent"]; ok && sc != nil {
		out["structuredContent"] = sc
	}
	if ie, _ := r["isError"].(bool); ie {
		out["isError"] = true
	}
	return out
}

// asMap turns a client's result value into its JSON form.
func asMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	err = json.Unmarshal(b, &m)
	return m, err
}

func errorInfo(err error) map[string]any {
	msg := err.Error()
	if len(msg) > 300 {
		msg = msg[:300]
	}
	out := map[string]any{"message": msg}
	var re *rpcError
	if errors.As(err, &re) {
		out["code"] = float64(re.code)
	}
	return out
}

func outcome(r map[string]any, err error) map[string]any {
	if err != nil {
		out := errorInfo(err)
		out["kind"] = "rpcError"
		return out
	}
	kind := "result"
	if ie, _ := r["isError"].(bool); ie {
		kind = "isError"
	}
	return map[string]any{"kind": kind, "result": normalize(r)}
}

// runScenario drives a through the cell's steps (see scenario.mjs).
func runScenario(ctx context.Context, a adapter, cfg cellConfig) runOut {
	out := runOut{}
	// step runs one step; a step that hangs fails after stepTimeout and
	// the later steps still run (the client's calls take ctx).
	step := func(key string, fn func(ctx context.Context) (map[string]any, error)) {
		t0 := time.Now()
		sctx, cancel := context.WithTimeout(ctx, stepTimeout)
		res, err := fn(sctx)
		cancel()
		if err != nil {
			res = map[string]any{"ok": false, "error": errorInfo(err)}
		} else {
			if res == nil {
				res = map[string]any{}
			}
			res["ok"] = true
		}
		res["ms"] = float64(time.Since(t0).Milliseconds())
		out[key] = res
	}
	runCtx := ctx
	step("init", func(context.Context) (map[string]any, error) {
		// The connection lives for the whole run: some transports end with
		// the context they were started with.
		name, version, err := a.connect(runCtx)
		return map[string]any{"server": name, "protocolVersion": version}, err
	})
	if out["init"]["ok"] != true {
		return out
	}
	step("tools", func(ctx context.Context) (map[string]any, error) {
		tools, err := a.listTools(ctx)
		if err != nil {
			return nil, err
		}
		names := []any{}
		ts := map[string]any{}
		for _, t := range tools {
			names = append(names, t.name)
			if t.taskSupport != "" {
				ts[t.name] = t.taskSupport
			}
		}
		sort.Slice(names, func(i, j int) bool { return names[i].(string) < names[j].(string) })
		return map[string]any{"names": names, "taskSupport": ts}, nil
	})
	tasks := cfg.Gateway && a.hasTasks()
	if c := cfg.Plain; c != nil {
		step("plain", func(ctx context.Context) (map[string]any, error) {
			r, err := a.call(ctx, c.Name, c.Arguments, nil)
			return map[string]any{"result": normalize(r)}, err
		})
		if a.hasTasks() {
			step("task", func(ctx context.Context) (map[string]any, error) {
				var r map[string]any
				var err error
				if tasks {
					r, err = a.callTask(ctx, c.Name, c.Arguments, nil)
				} else {
					r, err = a.call(ctx, c.Name, c.Arguments, nil)
				}
				return map[string]any{"result": normalize(r)}, err
			})
		}
	}
	if c := cfg.Progress; c != nil {
		step("progress", func(ctx context.Context) (map[string]any, error) {
			var mu sync.Mutex
			plain := 0
			if _, err := a.call(ctx, c.Name, c.Arguments, func() { mu.Lock(); plain++; mu.Unlock() }); err != nil {
				return nil, err
			}
			mu.Lock()
			res := map[string]any{"plain": float64(plain)}
			mu.Unlock()
			if tasks && a.taskProgress() {
				task := 0
				if _, err := a.callTask(ctx, c.Name, c.Arguments, func() { mu.Lock(); task++; mu.Unlock() }); err != nil {
					return nil, err
				}
				mu.Lock()
				res["task"] = float64(task)
				mu.Unlock()
			}
			return res, nil
		})
	}
	if c := cfg.Elicit; c != nil && a.hasTasks() {
		step("elicit", func(ctx context.Context) (map[string]any, error) {
			var r map[string]any
			var err error
			if tasks {
				r, err = a.callTask(ctx, c.Name, c.Arguments, nil)
			} else {
				r, err = a.call(ctx, c.Name, c.Arguments, nil)
			}
			return map[string]any{"result": normalize(r), "asked": float64(a.asked())}, err
		})
	}
	if c := cfg.Error; c != nil {
		step("error", func(ctx context.Context) (map[string]any, error) {
			res := map[string]any{"plain": outcome(a.call(ctx, c.Name, c.Arguments, nil))}
			if tasks {
				res["task"] = outcome(a.callTask(ctx, c.Name, c.Arguments, nil))
			} else if a.hasTasks() {
				res["task"] = outcome(a.call(ctx, c.Name, c.Arguments, nil))
			}
			return res, nil
		})
	}
	if c := cfg.Cancel; c != nil {
		step("cancel", func(ctx context.Context) (map[string]any, error) { return cancelStep(ctx, a, c, tasks) })
	}
	return out
}

type callStats struct{ started, cancelled float64 }

func statsOf(ctx context.Context, a adapter, c *call) (callStats, error) {
	r, err := a.call(ctx, c.Stats, map[string]any{}, nil)
	if err != nil {
		return callStats{}, err
	}
	sc, _ := r["structuredContent"].(map[string]any)
	if sc == nil {
		content, _ := r["content"].([]any)
		if len(content) > 0 {
			text, _ := content[0].(map[string]any)["text"].(string)
			_ = json.Unmarshal([]byte(text), &sc)
		}
	}
	calls, _ := sc["calls"].(map[string]any)
	started, _ := calls[c.Name].(float64)
	cancelled, _ := sc["cancelled"].(float64)
	return callStats{started, cancelled}, nil
}

func pollStats(ctx context.Context, a adapter, c *call, cond func(callStats) bool) (callStats, error) {
	end := time.Now().Add(10 * time.Second)
	for {
		s, err := statsOf(ctx, a, c)
		if err != nil || cond(s) || time.Now().After(end) {
			return s, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cancelStep starts the slow call (as a task through taskgate when the
// client can), waits until the server runs it, cancels it, and reports
// whether the server saw the cancellation.
func cancelStep(ctx context.Context, a adapter, c *call, tasks bool) (map[string]any, error) {
	before, err := statsOf(ctx, a, c)
	if err != nil {
		return nil, err
	}
	var stop func() error
	if tasks {
		if stop, err = a.startTask(ctx, c.Name, c.Arguments); err != nil {
			return nil, err
		}
	} else {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = a.call(cctx, c.Name, c.Arguments, nil)
		}()
		stop = func() error { cancel(); <-done; return nil }
	}
	started, err := pollStats(ctx, a, c, func(s callStats) bool { return s.started > before.started })
	if err != nil {
		_ = stop()
		return nil, err
	}
	if err := stop(); err != nil {
		return nil, err
	}
	after, err := pollStats(ctx, a, c, func(s callStats) bool { return s.cancelled > before.cancelled })
	if err != nil {
		return nil, err
	}
	return map[string]any{"started": started.started > before.started, "reached": after.cancelled > before.cancelled}, nil
}

var tokenSeq struct {
	sync.Mutex
	n int
}

func nextToken() string {
	tokenSeq.Lock()
	defer tokenSeq.Unlock()
	tokenSeq.n++
	return "interop-" + strconv.Itoa(tokenSeq.n)
}
