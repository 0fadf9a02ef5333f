package main

// The 2025-11-25 requests tgload sends (tools/call, with or without a task;
// tasks/get, result, cancel, list), each checking its answer's shape.

import (
	"bytes"
	"encoding/json"
	"strconv"
)

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
	if c.wire2026 {
		return c.call26(s)
	}
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
	if c.wire2026 {
		t, err := c.get26(s, taskID)
		return t.Status, err
	}
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
