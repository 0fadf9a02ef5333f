package proxy

import (
	"encoding/json"
	"strconv"
)

// JSON-RPC error codes (JSON-RPC 2.0 section 5.1, which MCP uses unchanged).
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
	codeInternalError  = -32603
)

// rpcError is a JSON-RPC error the proxy itself answers with.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return e.Message }

func newRPCError(code int, msg string) *rpcError { return &rpcError{Code: code, Message: msg} }

// appendErrorResponse appends a JSON-RPC error response for id (raw JSON;
// nil means null) to dst.
func appendErrorResponse(dst, id []byte, code int, msg string) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	if id == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, id...)
	}
	dst = append(dst, `,"error":{"code":`...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, `,"message":`...)
	dst = appendJSONString(dst, msg)
	return append(dst, "}}"...)
}

// appendRawErrorResponse appends an error response whose error object is
// given verbatim (an upstream's error replayed, T-38).
func appendRawErrorResponse(dst, id, errObj []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"error":`...)
	dst = append(dst, errObj...)
	return append(dst, '}')
}

// appendResultResponse appends a success response carrying result verbatim.
func appendResultResponse(dst, id, result []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"result":`...)
	dst = append(dst, result...)
	return append(dst, '}')
}

func appendJSONString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}
