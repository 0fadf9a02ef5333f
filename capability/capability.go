package capability

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/taskgate/taskgate/capability/jsonx"
)

// ProtocolVersion is the protocol revision whose tasks surface taskgate serves.
const ProtocolVersion = "2025-11-25"

// ErrMalformed reports a message that cannot be rewritten safely: not a JSON
// object, invalid JSON, a duplicate key in an object the rewrite inspects, or
// a member of the wrong type (such as a non-object "result"). Callers forward
// the original bytes unchanged.
var ErrMalformed = errors.New("capability: malformed message")

// tasksCaps and tasksCapsNoList are the server "tasks" capability taskgate
// declares (T-02); "list" only when requestors can be identified (T-76).
const (
	tasksCaps       = `{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}`
	tasksCapsNoList = `{"cancel":{},"requests":{"tools":{"call":{}}}}`
)

// InitOptions control RewriteInitialize. The zero value injects tasks
// without tasks.list and never bridges versions.
type InitOptions struct {
	// List adds tasks.list (only when requestors can be identified, T-76).
	List bool
	// Bridge: the client asked for ProtocolVersion and bridging is enabled; if the
	// upstream negotiated an older version, answer ProtocolVersion instead.
	Bridge bool
	// OwnTasks: an upstream's own capabilities.tasks is replaced by
	// taskgate's instead of leaving the message unchanged (the policy's
	// ownTasks).
	OwnTasks bool
}

// InitInfo reports what RewriteInitialize saw and did.
type InitInfo struct {
	UpstreamHasTasks bool   // upstream result already declares capabilities.tasks: output == input unless OwnTasks
	UpstreamVersion  string // protocolVersion as the upstream sent it ("" if absent)
	Injected         bool   // tasks capability was added
	Bridged          bool   // protocolVersion was rewritten to ProtocolVersion
}

// RewriteInitialize rewrites one JSON-RPC response message (the whole object
// {"jsonrpc":"2.0","id":..,"result":{...}}) that carries an InitializeResult.
//
// If result.capabilities.tasks exists (with any value) the message is
// returned unchanged (P-01), unless opt.OwnTasks is set: then its value is
// replaced by taskgate's as below (the member keeps its place). Otherwise,
// if result.protocolVersion is ProtocolVersion, the tasks capability is
// added at the end of result.capabilities, which is created when absent or
// null. If the upstream
// version is an older YYYY-MM-DD version and opt.Bridge is set, the version
// is also replaced by ProtocolVersion. Any other version leaves the message
// unchanged: tasks only exist at ProtocolVersion.
//
// Error responses (any "error" member, even null) and messages without
// "result" are returned unchanged with a nil error. Input that is not a valid JSON object, has a duplicate key in
// the message, result or capabilities object, or whose result, capabilities
// or protocolVersion has the wrong type yields an error wrapping
// ErrMalformed. When nothing changes or on error the returned slice is msg
// itself; otherwise it is a new buffer and msg is not modified.
func RewriteInitialize(msg []byte, opt InitOptions) ([]byte, InitInfo, error) {
	var info InitInfo
	res, ok, err := result(msg)
	if err != nil || !ok {
		return msg, info, err
	}
	var rbuf, cbuf [16]jsonx.Member // most objects fit: no allocation
	ms, _, err := scanObject(msg, res, rbuf[:0], "result")
	if err != nil {
		return msg, info, err
	}
	pv, hasPV := jsonx.Find(ms, "protocolVersion")
	if hasPV {
		if pv.Kind != '"' {
			return msg, info, fmt.Errorf("capability: result.protocolVersion is not a string: %w", ErrMalformed)
		}
		v, err := unquote(msg[pv.VS:pv.VE])
		if err != nil {
			return msg, info, fmt.Errorf("capability: result.protocolVersion: %w", ErrMalformed)
		}
		info.UpstreamVersion = version(v)
	}
	caps, hasCaps := jsonx.Find(ms, "capabilities")
	var cms []jsonx.Member
	var upTasks jsonx.Member
	if hasCaps {
		switch caps.Kind {
		case '{':
			if cms, _, err = scanObject(msg, caps.VS, cbuf[:0], "result.capabilities"); err != nil {
				return msg, info, err
			}
			if upTasks, info.UpstreamHasTasks = jsonx.Find(cms, "tasks"); info.UpstreamHasTasks && !opt.OwnTasks {
				return msg, info, nil
			}
		case 'n':
			// null: treated as absent and replaced below.
		default:
			return msg, info, fmt.Errorf("capability: result.capabilities is not an object: %w", ErrMalformed)
		}
	}

	edits := make([]jsonx.Edit, 0, 2)
	switch {
	case info.UpstreamVersion == ProtocolVersion:
	case opt.Bridge && isVersion(info.UpstreamVersion) && info.UpstreamVersion < ProtocolVersion:
		edits = append(edits, jsonx.Edit{Start: pv.VS, End: pv.VE, Val: `"` + ProtocolVersion + `"`})
		info.Bridged = true
	default:
		return msg, info, nil
	}

	tasks := tasksCapsNoList
	if opt.List {
		tasks = tasksCaps
	}
	switch {
	case info.UpstreamHasTasks: // and opt.OwnTasks
		edits = append(edits, jsonx.Edit{Start: upTasks.VS, End: upTasks.VE, Val: tasks})
	case hasCaps && caps.Kind == '{':
		pos, comma := jsonx.InsertAt(cms, caps.VS)
		pre := `"tasks":`
		if comma {
			pre = `,"tasks":`
		}
		edits = append(edits, jsonx.Edit{Start: pos, End: pos, Pre: pre, Val: tasks})
	case hasCaps: // null
		edits = append(edits, jsonx.Edit{Start: caps.VS, End: caps.VE, Pre: `{"tasks":`, Val: tasks, Post: `}`})
	default:
		pos, comma := jsonx.InsertAt(ms, res)
		pre := `"capabilities":{"tasks":`
		if comma {
			pre = `,"capabilities":{"tasks":`
		}
		edits = append(edits, jsonx.Edit{Start: pos, End: pos, Pre: pre, Val: tasks, Post: `}`})
	}
	info.Injected = true
	return jsonx.Splice(msg, edits), info, nil
}

// RewriteToolsList rewrites one JSON-RPC response message carrying a
// ListToolsResult: each tool's execution.taskSupport is set to support(tool.name).
//
// support must be non-nil; it is called once per tool with the unescaped
// name, and its result is written as a JSON string (callers return
// "forbidden", "optional" or "required"). An existing taskSupport is
// overwritten; "execution" is created when absent or null, and its other
// members are kept. A tool whose "name" is absent or not a string is left
// unchanged. Everything else, including nextCursor and _meta, is kept byte
// for byte.
//
// Error responses (any "error" member), messages without "result" and
// results without "tools"
// are returned unchanged with a nil error. Input that is not a valid JSON
// object, has a duplicate key in the message, the result, a tool or its
// execution object, or has a non-object result, a non-array tools, a
// non-object tool or a non-object, non-null execution yields an error
// wrapping ErrMalformed. When nothing changes or on error the returned slice
// is msg itself; otherwise it is a new buffer and msg is not modified.
func RewriteToolsList(msg []byte, support func(name string) string) ([]byte, error) {
	res, ok, err := result(msg)
	if err != nil || !ok {
		return msg, err
	}
	var rbuf [16]jsonx.Member
	ms, _, err := scanObject(msg, res, rbuf[:0], "result")
	if err != nil {
		return msg, err
	}
	tools, ok := jsonx.Find(ms, "tools")
	if !ok {
		return msg, nil
	}
	if tools.Kind != '[' {
		return msg, fmt.Errorf("capability: result.tools is not an array: %w", ErrMalformed)
	}

	var (
		edits = make([]jsonx.Edit, 0, 64)
		tms   = make([]jsonx.Member, 0, 16)
		tr    = toolRewriter{msg: msg, support: support}
	)
	i := jsonx.SkipSpace(msg, tools.VS+1)
	if msg[i] == ']' {
		return msg, nil
	}
	for {
		if msg[i] != '{' {
			return msg, fmt.Errorf("capability: result.tools element is not an object: %w", ErrMalformed)
		}
		var end int
		if tms, end, err = scanObject(msg, i, tms, "tool"); err != nil {
			return msg, err
		}
		e, ok, err := tr.edit(i, tms)
		if err != nil {
			return msg, err
		}
		if ok {
			edits = append(edits, e)
		}
		i = jsonx.SkipSpace(msg, end)
		if msg[i] == ']' {
			break
		}
		i = jsonx.SkipSpace(msg, i+1) // ','
	}
	if len(edits) == 0 {
		return msg, nil
	}
	return jsonx.Splice(msg, edits), nil
}

// toolRewriter computes the taskSupport edit of each tool of one message.
type toolRewriter struct {
	msg     []byte
	support func(string) string
	ems     []jsonx.Member // scratch for execution objects
	lastS   string         // most recent support value
	lastVal string         // lastS as a JSON string, "" before the first tool
}

// edit returns the edit that sets taskSupport on the tool object at
// tr.msg[open], scanned as tms; ok is false when the tool stays unchanged.
func (tr *toolRewriter) edit(open int, tms []jsonx.Member) (e jsonx.Edit, ok bool, err error) {
	msg := tr.msg
	nm, ok := jsonx.Find(tms, "name")
	if !ok || nm.Kind != '"' {
		return jsonx.Edit{}, false, nil
	}
	name, err := unquote(msg[nm.VS:nm.VE])
	if err != nil {
		return jsonx.Edit{}, false, fmt.Errorf("capability: tool name: %w", ErrMalformed)
	}
	if s := tr.support(string(name)); s != tr.lastS || tr.lastVal == "" {
		b, _ := json.Marshal(s) // a string always marshals
		tr.lastS, tr.lastVal = s, string(b)
	}
	val := tr.lastVal

	ex, ok := jsonx.Find(tms, "execution")
	switch {
	case !ok:
		pos, comma := jsonx.InsertAt(tms, open)
		pre := `"execution":{"taskSupport":`
		if comma {
			pre = `,"execution":{"taskSupport":`
		}
		return jsonx.Edit{Start: pos, End: pos, Pre: pre, Val: val, Post: `}`}, true, nil
	case ex.Kind == 'n':
		return jsonx.Edit{Start: ex.VS, End: ex.VE, Pre: `{"taskSupport":`, Val: val, Post: `}`}, true, nil
	case ex.Kind != '{':
		return jsonx.Edit{}, false, fmt.Errorf("capability: tool execution is not an object: %w", ErrMalformed)
	}
	if tr.ems, _, err = scanObject(msg, ex.VS, tr.ems, "tool execution"); err != nil {
		return jsonx.Edit{}, false, err
	}
	if ts, ok := jsonx.Find(tr.ems, "taskSupport"); ok {
		if string(msg[ts.VS:ts.VE]) == val {
			return jsonx.Edit{}, false, nil
		}
		return jsonx.Edit{Start: ts.VS, End: ts.VE, Val: val}, true, nil
	}
	pos, comma := jsonx.InsertAt(tr.ems, ex.VS)
	pre := `"taskSupport":`
	if comma {
		pre = `,"taskSupport":`
	}
	return jsonx.Edit{Start: pos, End: pos, Pre: pre, Val: val}, true, nil
}

// result validates msg and returns the index of the '{' of its "result"
// member. ok is false for error responses and messages without "result".
func result(msg []byte) (open int, ok bool, err error) {
	if err := validate(msg, ""); err != nil {
		return 0, false, err
	}
	i := jsonx.SkipSpace(msg, 0)
	if msg[i] != '{' {
		return 0, false, fmt.Errorf("capability: message is not an object: %w", ErrMalformed)
	}
	var buf [8]jsonx.Member
	ms, _, err := scanObject(msg, i, buf[:0], "message")
	if err != nil {
		return 0, false, err
	}
	if _, ok := jsonx.Find(ms, "error"); ok {
		return 0, false, nil
	}
	r, ok := jsonx.Find(ms, "result")
	if !ok {
		return 0, false, nil
	}
	if r.Kind != '{' {
		return 0, false, fmt.Errorf("capability: result is not an object: %w", ErrMalformed)
	}
	return r.VS, true, nil
}

// isVersion reports whether v has the YYYY-MM-DD shape of MCP protocol
// versions, which then order lexicographically.
func isVersion(v string) bool {
	if len(v) != len(ProtocolVersion) {
		return false
	}
	for i := range len(v) {
		switch i {
		case 4, 7:
			if v[i] != '-' {
				return false
			}
		default:
			if v[i] < '0' || v[i] > '9' {
				return false
			}
		}
	}
	return true
}

// knownVersions are the published MCP protocol versions; version returns
// these without allocating.
var knownVersions = [...]string{"2024-11-05", "2025-03-26", "2025-06-18", ProtocolVersion, "2026-07-28"}

// version returns v as a string.
func version(v []byte) string {
	for _, k := range knownVersions {
		if string(v) == k {
			return k
		}
	}
	return string(v)
}
