// Package schema renders taskgate's tasks on the wire of MCP 2026-07-28,
// where tasks are the extension "io.modelcontextprotocol/tasks": the flat
// CreateTaskResult with resultType "task", tasks/get answering a
// DetailedTask with the result or error inline, empty acknowledgements for
// tasks/update and tasks/cancel, and the errors of that revision with the
// data their schema requires. It is pure: no I/O, no store, no HTTP.
//
// Requests of that revision carry no session: each names its protocol
// version and its client's capabilities in params._meta, and a client opts
// into tasks per request by declaring the extension there.
package schema

import (
	"encoding/json"
	"strconv"
	"time"
)

// ProtocolVersion is the revision this package speaks.
const ProtocolVersion = "2026-07-28"

// Keys of params._meta and names of the extension.
const (
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	MetaClientInfo         = "io.modelcontextprotocol/clientInfo"
	MetaLogLevel           = "io.modelcontextprotocol/logLevel"
	ExtensionTasks         = "io.modelcontextprotocol/tasks"
)

// HTTP headers every request of this revision carries: the JSON-RPC method,
// and the name the request is about (params.name of tools/call, params.uri
// of resources/read, params.taskId of tasks/get, tasks/update, tasks/cancel).
const (
	HeaderMethod = "Mcp-Method"
	HeaderName   = "Mcp-Name"
)

// JSON-RPC error codes of this revision. Each is answered with HTTP 400.
const (
	// CodeHeaderMismatch: an HTTP header disagrees with the body, or a
	// required header is missing or malformed.
	CodeHeaderMismatch = -32020
	// CodeMissingCapability: the request needs a client capability it did
	// not declare; data.requiredCapabilities names it.
	CodeMissingCapability = -32021
	// CodeUnsupportedVersion: the protocol version is not served;
	// data.supported lists those that are, data.requested echoes it.
	CodeUnsupportedVersion = -32022
)

// SupportedVersions are the versions taskgate serves on one endpoint: this
// revision, and 2025-11-25 for clients that initialize a session.
var SupportedVersions = []string{ProtocolVersion, "2025-11-25"}

// Task is what the wire shows of a stored task.
type Task struct {
	ID            string
	Status        string // working, input_required, completed, failed or cancelled
	StatusMessage string
	CreatedAt     time.Time
	UpdatedAt     time.Time
	TTL           time.Duration // > 0
	PollInterval  time.Duration // 0 = not reported
}

// timeFormat is RFC 3339 in UTC with milliseconds.
const timeFormat = "2006-01-02T15:04:05.000Z"

func appendTaskFields(dst []byte, t *Task) []byte {
	dst = append(dst, `"taskId":`...)
	dst = appendString(dst, t.ID)
	dst = append(dst, `,"status":`...)
	dst = appendString(dst, t.Status)
	if t.StatusMessage != "" {
		dst = append(dst, `,"statusMessage":`...)
		dst = appendString(dst, t.StatusMessage)
	}
	dst = append(dst, `,"createdAt":"`...)
	dst = t.CreatedAt.UTC().AppendFormat(dst, timeFormat)
	dst = append(dst, `","lastUpdatedAt":"`...)
	dst = t.UpdatedAt.UTC().AppendFormat(dst, timeFormat)
	dst = append(dst, `","ttlMs":`...)
	dst = strconv.AppendInt(dst, max(t.TTL.Milliseconds(), 1), 10)
	if t.PollInterval > 0 {
		dst = append(dst, `,"pollIntervalMs":`...)
		dst = strconv.AppendInt(dst, max(t.PollInterval.Milliseconds(), 1), 10)
	}
	return dst
}

// AppendCreateTaskResult appends the flat CreateTaskResult of t:
// resultType "task" and the task's fields, nothing else.
func AppendCreateTaskResult(dst []byte, t *Task) []byte {
	dst = append(dst, `{"resultType":"task",`...)
	dst = appendTaskFields(dst, t)
	return append(dst, '}')
}

// Detail is what a DetailedTask carries beside the task's fields: by
// status, the result (completed), the error (failed) or the open input
// requests (input_required). Each is raw JSON, used verbatim.
type Detail struct {
	Result        []byte // a CallToolResult object of this revision: it carries resultType "complete"
	Error         []byte // a JSON-RPC error object {code, message, data?}
	InputRequests []byte // an object: key -> {method, params}
}

// AppendGetResult appends the result of tasks/get: resultType "complete",
// the task's fields and the member of d that its status calls for.
func AppendGetResult(dst []byte, t *Task, d Detail) []byte {
	dst = append(dst, `{"resultType":"complete",`...)
	dst = appendTaskFields(dst, t)
	switch t.Status {
	case "completed":
		if d.Result != nil {
			dst = append(dst, `,"result":`...)
			dst = append(dst, d.Result...)
		}
	case "failed":
		if d.Error != nil {
			dst = append(dst, `,"error":`...)
			dst = append(dst, d.Error...)
		}
	case "input_required":
		dst = append(dst, `,"inputRequests":`...)
		if d.InputRequests == nil {
			dst = append(dst, "{}"...)
		} else {
			dst = append(dst, d.InputRequests...)
		}
	}
	return append(dst, '}')
}

// Ack is the empty result of tasks/update and tasks/cancel.
const Ack = `{"resultType":"complete"}`

// AppendInputRequired appends an InputRequiredResult: the questions a call
// needs answered before it can go on, and the state the client echoes on
// its retry.
func AppendInputRequired(dst, inputRequests []byte, requestState string) []byte {
	dst = append(dst, `{"resultType":"input_required","inputRequests":`...)
	dst = append(dst, inputRequests...)
	if requestState != "" {
		dst = append(dst, `,"requestState":`...)
		dst = appendString(dst, requestState)
	}
	return append(dst, '}')
}

// RequiredTasksData is the data of CodeMissingCapability when a request
// needs the tasks extension.
const RequiredTasksData = `{"requiredCapabilities":{"extensions":{"` + ExtensionTasks + `":{}}}}`

// UnsupportedVersionData is the data of CodeUnsupportedVersion.
func UnsupportedVersionData(requested string) []byte {
	b, _ := json.Marshal(struct {
		Supported []string `json:"supported"`
		Requested string   `json:"requested"`
	}{SupportedVersions, requested})
	return b
}

func appendString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}
