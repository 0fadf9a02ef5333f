package main

// The MCP 2026-07-28 wire (--era 2026): no initialize and no session; every
// request names its protocol version and client capabilities in
// params._meta and its method (and tool or task) in headers. A tools/call
// that declares the tasks extension may become a task: its answer is then
// a flat CreateTaskResult, and tasks/get is polled until the task is
// terminal, its result inline. The figures sit next to the 2025-11-25 ones
// of the same mode, measured by the same workers.

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

const (
	// era2026 is the protocol version of the 2026 wire, in --era and on
	// the wire.
	era2026 = "2026-07-28"
	// era2025 names the 2025-11-25 wire in --era (its version on the wire
	// is --protocol-version).
	era2025 = "2025"
)

// eraLabel is a result's era field: empty for the 2025 wire, whose output
// is as it was before tgload knew another.
func eraLabel(era string) string {
	if era == era2026 {
		return era2026
	}
	return ""
}

// eraSuffix names a run's era in messages.
func eraSuffix(era string) string {
	if era == era2026 {
		return " (era " + era2026 + ")"
	}
	return ""
}

// metaPlain and metaTasks are the _meta of a 2026 request, without and with
// the tasks extension declared.
const (
	metaPlain = `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + era2026 +
		`","io.modelcontextprotocol/clientCapabilities":{}}`
	metaTasks = `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + era2026 +
		`","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`
)

// callBody26 is a 2026 tools/call; task declares the tasks extension.
func (c *client) callBody26(id int64, tool string, args []byte, task bool) []byte {
	b := c.buf[:0]
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `,"method":"tools/call","params":{"name":`...)
	b = strconv.AppendQuote(b, tool)
	b = append(b, `,"arguments":`...)
	b = append(b, args...)
	b = append(b, ',')
	if task {
		b = append(b, metaTasks...)
	} else {
		b = append(b, metaPlain...)
	}
	b = append(b, "}}"...)
	c.buf = b
	return b
}

// taskBody26 is a 2026 tasks/* request on taskID, declaring the extension
// (the wire refuses tasks/* without it).
func (c *client) taskBody26(id int64, method, taskID string) []byte {
	b := c.buf[:0]
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `,"method":"`...)
	b = append(b, method...)
	b = append(b, `","params":{"taskId":`...)
	b = strconv.AppendQuote(b, taskID)
	b = append(b, ',')
	b = append(b, metaTasks...)
	b = append(b, "}}"...)
	c.buf = b
	return b
}

// rpc26 sends a 2026 request: its Mcp-Method and Mcp-Name headers go with it.
func (c *client) rpc26(s *session, body []byte, id int64, method, name string) (answer, error) {
	c.mcpMethod, c.mcpName = method, name
	defer func() { c.mcpMethod, c.mcpName = "", "" }()
	return c.rpc(s, body, id, acceptBoth)
}

// call26 is a plain 2026 tools/call of --tool.
func (c *client) call26(s *session) error {
	id := c.nextID()
	a, err := c.rpc26(s, c.callBody26(id, c.cfg.tool, c.cfg.args, false), id, "tools/call", c.cfg.tool)
	if err != nil {
		return err
	}
	return checkToolResult(a.msg.Result)
}

// task26 is a 2026 Task (a CreateTaskResult or a tasks/get result) as far
// as tgload looks at it.
type task26 struct {
	ResultType     string          `json:"resultType"`
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	PollIntervalMs *int64          `json:"pollIntervalMs"`
	Result         json.RawMessage `json:"result"`
}

// create26 calls tool declaring the tasks extension. The answer is a task
// (its id), or, for a call that ended before the server made it a task
// (taskgate's --promote-window), the tool's result: inline is then true and
// the id empty.
func (c *client) create26(s *session, tool string, args []byte) (taskID string, inline bool, err error) {
	id := c.nextID()
	a, err := c.rpc26(s, c.callBody26(id, tool, args, true), id, "tools/call", tool)
	if err != nil {
		return "", false, err
	}
	var r task26
	if err := json.Unmarshal(a.msg.Result, &r); err != nil {
		return "", false, errf("bad-result", "%v: %.200s", err, a.msg.Result)
	}
	switch r.ResultType {
	case "task":
	case "", "complete":
		return "", true, checkToolResult(a.msg.Result)
	default:
		return "", false, errf("bad-result-type", "tools/call: resultType %q: %.200s", r.ResultType, a.msg.Result)
	}
	if r.TaskID == "" || r.PollIntervalMs == nil || *r.PollIntervalMs <= 0 {
		return "", false, errf("not-a-task", "CreateTaskResult expected: %.200s", a.msg.Result)
	}
	switch r.Status {
	case "working", "completed", "input_required":
	default:
		return "", false, errf("bad-status", "created task is %q", r.Status)
	}
	return r.TaskID, false, nil
}

// get26 is a 2026 tasks/get of taskID.
func (c *client) get26(s *session, taskID string) (task26, error) {
	id := c.nextID()
	a, err := c.rpc26(s, c.taskBody26(id, "tasks/get", taskID), id, "tasks/get", taskID)
	if err != nil {
		return task26{}, err
	}
	var t task26
	if err := json.Unmarshal(a.msg.Result, &t); err != nil || t.TaskID != taskID || t.Status == "" || t.ResultType != "complete" {
		return task26{}, errf("bad-task", "tasks/get: %.200s", a.msg.Result)
	}
	if t.Status == "completed" && !bytes.Contains(t.Result, []byte(`"content"`)) {
		return task26{}, errf("no-inline-result", "tasks/get of a completed task: %.200s", a.msg.Result)
	}
	return t, nil
}

// createPoll26 is one create-result iteration on the 2026 wire: the task
// call, then tasks/get until the task is terminal, waiting in between the
// poll interval the server reports, as a client following it would, or
// --poll-interval (the wire has no blocking tasks/result). A call answered
// inline ends the iteration at once.
func (w *worker) createPoll26() error {
	s := w.session(0)
	var taskID string
	if err := w.timed(opCreate, func() error {
		var err error
		taskID, err = w.create(s, w.cfg.tool, w.cfg.args)
		return err
	}); err != nil || taskID == "" {
		return err
	}
	deadline := time.Now().Add(w.cfg.timeout)
	for {
		var t task26
		if err := w.timed(opGet, func() error {
			var err error
			t, err = w.c.get26(s, taskID)
			return err
		}); err != nil {
			return err
		}
		switch t.Status {
		case "completed":
			return checkToolResult(t.Result)
		case "working":
		default:
			return errf("bad-status", "polled task is %q", t.Status)
		}
		if time.Now().After(deadline) {
			return errf("timeout", "task %s still %s after --timeout", taskID, t.Status)
		}
		wait := w.cfg.pollInterval
		if wait == 0 && t.PollIntervalMs != nil {
			wait = time.Duration(*t.PollIntervalMs) * time.Millisecond
		}
		time.Sleep(wait)
	}
}

// create is a task call of the worker's era. On the 2026 wire a call
// answered inline returns an empty id, and is counted when it started in
// the window.
func (w *worker) create(s *session, tool string, args []byte) (string, error) {
	if !w.c.wire2026 {
		return w.c.create(s, tool, args, "")
	}
	t0 := time.Now()
	id, inline, err := w.c.create26(s, tool, args)
	if inline && err == nil && w.win.startedIn(t0) {
		w.inline++
	}
	return id, err
}
