package wire

import (
	"encoding/json"
	"strconv"

	"github.com/valyala/fasthttp"
)

// JSON-RPC error codes (JSON-RPC 2.0 section 5.1, which MCP uses unchanged).
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// Error is a JSON-RPC error taskgate itself answers with.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// NewError returns the error code with message msg.
func NewError(code int, msg string) *Error { return &Error{Code: code, Message: msg} }

// AppendError appends a JSON-RPC error response for id (raw JSON; nil
// means null) to dst.
func AppendError(dst, id []byte, code int, msg string) []byte {
	return AppendErrorData(dst, id, code, msg, nil)
}

// AppendErrorData is AppendError with the error's data (raw JSON; nil
// omits it). It is the one writer of taskgate's JSON-RPC error responses.
func AppendErrorData(dst, id []byte, code int, msg string, data []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	if id == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, id...)
	}
	dst = append(dst, `,"error":`...)
	dst = appendErrorObject(dst, code, msg, data)
	return append(dst, '}')
}

// AppendErrorObject appends a JSON-RPC error object (what a failed task's
// 2026 DetailedTask carries when taskgate, not the upstream, failed it).
func AppendErrorObject(dst []byte, code int, msg string) []byte {
	return appendErrorObject(dst, code, msg, nil)
}

func appendErrorObject(dst []byte, code int, msg string, data []byte) []byte {
	dst = append(dst, `{"code":`...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, `,"message":`...)
	dst = AppendJSONString(dst, msg)
	if data != nil {
		dst = append(dst, `,"data":`...)
		dst = append(dst, data...)
	}
	return append(dst, '}')
}

// AppendRawError appends an error response whose error object is given
// verbatim (an upstream's error replayed, T-38).
func AppendRawError(dst, id, errObj []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"error":`...)
	dst = append(dst, errObj...)
	return append(dst, '}')
}

// AppendResult appends a success response carrying result verbatim.
func AppendResult(dst, id, result []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"result":`...)
	dst = append(dst, result...)
	return append(dst, '}')
}

// AppendJSONString appends s as a JSON string.
func AppendJSONString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}

// HTTPError answers with an HTTP status and a JSON-RPC error body.
func HTTPError(rc *fasthttp.RequestCtx, status int, id []byte, code int, msg string) {
	rc.Response.Reset()
	rc.SetStatusCode(status)
	rc.Response.Header.SetContentType("application/json")
	rc.SetBody(AppendError(nil, id, code, msg))
}

// RPCError answers HTTP 200 with a JSON-RPC error for the request id.
func RPCError(rc *fasthttp.RequestCtx, info *Info, id []byte, e *Error) {
	info.Outcome = "rpc_error"
	HTTPError(rc, fasthttp.StatusOK, id, e.Code, e.Message)
}

// RPCResult answers HTTP 200 with a JSON-RPC result.
func RPCResult(rc *fasthttp.RequestCtx, id, result []byte) {
	rc.SetStatusCode(fasthttp.StatusOK)
	rc.Response.Header.SetContentType("application/json")
	rc.SetBody(AppendResult(make([]byte, 0, len(result)+64), id, result))
}

// SSEHeader starts rc's answer as a Server-Sent Events stream: HTTP 200,
// text/event-stream, no caching; with streaming, the headers are flushed
// before the body so that the client sees the stream open while its
// events are still to come (SetBodyStreamWriter).
func SSEHeader(rc *fasthttp.RequestCtx, streaming bool) {
	rc.SetStatusCode(fasthttp.StatusOK)
	rc.Response.Header.SetContentType("text/event-stream")
	rc.Response.Header.Set(fasthttp.HeaderCacheControl, "no-cache")
	rc.Response.ImmediateHeaderFlush = streaming
}
