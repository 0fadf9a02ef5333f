package capability

import (
	"encoding/json"
	"fmt"
)

// Rewrites for clients of MCP 2026-07-28. That revision has no initialize:
// a client learns the server's capabilities from server/discover, and the
// tasks feature is the extension ExtensionTasks, offered as
// capabilities.extensions[ExtensionTasks] = {} (never as the older
// capabilities.tasks). Every result carries a resultType, and tools have no
// execution member.

// ModernProtocolVersion is the protocol revision of the tasks extension.
const ModernProtocolVersion = "2026-07-28"

// ExtensionTasks names the tasks extension in capabilities.extensions.
const ExtensionTasks = "io.modelcontextprotocol/tasks"

// metaServerInfo is the _meta key of a DiscoverResult that carries what an
// InitializeResult's serverInfo said.
const metaServerInfo = "io.modelcontextprotocol/serverInfo"

// RewriteDiscover rewrites one JSON-RPC response message carrying a
// DiscoverResult so that it offers the tasks extension:
// result.capabilities.extensions[ExtensionTasks] = {} is added and a
// capabilities.tasks member (the 2025-11-25 form, which a server must not
// advertise beside the extension) is removed. native reports that the
// upstream already offers the extension; the message is then returned
// unchanged. Error responses and messages without a result are returned
// unchanged. Malformed input (invalid JSON, duplicate keys in the objects
// looked at, a non-object capabilities or extensions) wraps ErrMalformed.
func RewriteDiscover(msg []byte) (out []byte, native bool, err error) {
	res, ok, err := result(msg)
	if err != nil || !ok {
		return msg, false, err
	}
	var rbuf [16]member
	ms, _, err := scanObject(msg, res, rbuf[:0], "result")
	if err != nil {
		return msg, false, err
	}
	caps, hasCaps := find(ms, "capabilities")
	if !hasCaps || caps.kind == 'n' {
		val := `{"extensions":{"` + ExtensionTasks + `":{}}}`
		if hasCaps {
			return splice(msg, []edit{{start: caps.vs, end: caps.ve, val: val}}), false, nil
		}
		pos, comma := insertAt(ms, res)
		pre := `"capabilities":`
		if comma {
			pre = `,"capabilities":`
		}
		return splice(msg, []edit{{start: pos, end: pos, pre: pre, val: val}}), false, nil
	}
	newCaps, native, err := modernCapabilities(msg[caps.vs:caps.ve])
	if err != nil || native {
		return msg, native, err
	}
	return splice(msg, []edit{{start: caps.vs, end: caps.ve, val: string(newCaps)}}), false, nil
}

// modernCapabilities returns the server capabilities object caps (valid
// JSON) without "tasks" and with extensions[ExtensionTasks] = {}. native
// reports that caps already offers the extension (then out is nil).
func modernCapabilities(caps []byte) (out []byte, native bool, err error) {
	if len(caps) == 0 || caps[0] != '{' {
		return nil, false, fmt.Errorf("capability: capabilities is not an object: %w", ErrMalformed)
	}
	var cbuf, ebuf [16]member
	cms, _, err := scanObject(caps, 0, cbuf[:0], "capabilities")
	if err != nil {
		return nil, false, err
	}
	var ems []member
	if ext, ok := find(cms, "extensions"); ok && ext.kind != 'n' {
		if ext.kind != '{' {
			return nil, false, fmt.Errorf("capability: capabilities.extensions is not an object: %w", ErrMalformed)
		}
		if ems, _, err = scanObject(caps, ext.vs, ebuf[:0], "capabilities.extensions"); err != nil {
			return nil, false, err
		}
		if _, ok := find(ems, ExtensionTasks); ok {
			return nil, true, nil
		}
	}
	out = make([]byte, 0, len(caps)+64)
	out = append(out, '{')
	n := 0
	for _, m := range cms {
		if k := string(m.key); k == "tasks" || k == "extensions" {
			continue
		}
		out = appendMember(out, n, m.key, caps[m.vs:m.ve])
		n++
	}
	ext := make([]byte, 0, 64)
	ext = append(ext, '{')
	for i, m := range ems {
		ext = appendMember(ext, i, m.key, caps[m.vs:m.ve])
	}
	ext = appendMember(ext, len(ems), []byte(ExtensionTasks), []byte("{}"))
	ext = append(ext, '}')
	out = appendMember(out, n, []byte("extensions"), ext)
	return append(out, '}'), false, nil
}

// appendMember appends "key":val to an object being built, with a comma
// unless it is the object's first member (i == 0).
func appendMember(dst []byte, i int, key, val []byte) []byte {
	if i > 0 {
		dst = append(dst, ',')
	}
	k, _ := json.Marshal(string(key)) // a string always marshals
	dst = append(dst, k...)
	dst = append(dst, ':')
	return append(dst, val...)
}

// DiscoverFromInitialize builds the result of server/discover for a server
// of an older revision from the result object of its initialize (init,
// the InitializeResult): its capabilities offering the tasks extension
// (without capabilities.tasks), its instructions, its serverInfo under
// _meta, supportedVersions as given, and cache hints (ttlMs 0, cacheScope
// "public": the answer is the same for every client). Malformed input wraps
// ErrMalformed.
func DiscoverFromInitialize(init []byte, supportedVersions []string) ([]byte, error) {
	if !json.Valid(init) {
		return nil, fmt.Errorf("capability: initialize result: invalid JSON: %w", ErrMalformed)
	}
	i := skipSpace(init, 0)
	if init[i] != '{' {
		return nil, fmt.Errorf("capability: initialize result is not an object: %w", ErrMalformed)
	}
	var buf [16]member
	ms, _, err := scanObject(init, i, buf[:0], "initialize result")
	if err != nil {
		return nil, err
	}
	caps := []byte(`{"extensions":{"` + ExtensionTasks + `":{}}}`)
	if c, ok := find(ms, "capabilities"); ok && c.kind != 'n' {
		mc, native, err := modernCapabilities(init[c.vs:c.ve])
		switch {
		case err != nil:
			return nil, err
		case native:
			mc = init[c.vs:c.ve]
		}
		caps = mc
	}
	vs, _ := json.Marshal(supportedVersions)
	out := make([]byte, 0, len(init)+128)
	out = append(out, `{"resultType":"complete","supportedVersions":`...)
	out = append(out, vs...)
	out = append(out, `,"capabilities":`...)
	out = append(out, caps...)
	if in, ok := find(ms, "instructions"); ok && in.kind == '"' {
		out = append(out, `,"instructions":`...)
		out = append(out, init[in.vs:in.ve]...)
	}
	out = append(out, `,"ttlMs":0,"cacheScope":"public"`...)
	if si, ok := find(ms, "serverInfo"); ok && si.kind == '{' {
		out = append(out, `,"_meta":{"`+metaServerInfo+`":`...)
		out = append(out, init[si.vs:si.ve]...)
		out = append(out, '}')
	}
	return append(out, '}'), nil
}

// ModernResult rewrites one JSON-RPC response message of an upstream of an
// older revision for a client of ModernProtocolVersion: the result gets
// resultType "complete" when it has none, and with stripExecution every
// result.tools[] element loses its execution member (the newer revision has
// none; task support is negotiated per request). Error responses and
// messages without a result object are returned unchanged; malformed input
// wraps ErrMalformed and msg is returned.
func ModernResult(msg []byte, stripExecution bool) ([]byte, error) {
	res, ok, err := result(msg)
	if err != nil || !ok {
		return msg, err
	}
	var rbuf [16]member
	ms, end, err := scanObject(msg, res, rbuf[:0], "result")
	if err != nil {
		return msg, err
	}
	_, hasType := find(ms, "resultType")
	tools, hasTools := find(ms, "tools")
	if hasType && (!stripExecution || !hasTools) {
		return msg, nil
	}
	out := make([]byte, 0, len(msg)+32)
	out = append(out, msg[:res]...)
	out = append(out, '{')
	n := 0
	if !hasType {
		out = append(out, `"resultType":"complete"`...)
		n++
	}
	for _, m := range ms {
		val := msg[m.vs:m.ve]
		if stripExecution && hasTools && m.vs == tools.vs && m.kind == '[' {
			if val, err = stripToolsExecution(val); err != nil {
				return msg, err
			}
		}
		out = appendMember(out, n, m.key, val)
		n++
	}
	out = append(out, '}')
	return append(out, msg[end:]...), nil
}

// stripToolsExecution returns the tools array without each tool's execution.
func stripToolsExecution(tools []byte) ([]byte, error) {
	out := make([]byte, 0, len(tools))
	out = append(out, '[')
	var tbuf [16]member
	i := skipSpace(tools, 1)
	for n := 0; tools[i] != ']'; n++ {
		if tools[i] != '{' {
			return nil, fmt.Errorf("capability: result.tools element is not an object: %w", ErrMalformed)
		}
		tms, end, err := scanObject(tools, i, tbuf[:0], "tool")
		if err != nil {
			return nil, err
		}
		if n > 0 {
			out = append(out, ',')
		}
		out = append(out, '{')
		k := 0
		for _, m := range tms {
			if string(m.key) == "execution" {
				continue
			}
			out = appendMember(out, k, m.key, tools[m.vs:m.ve])
			k++
		}
		out = append(out, '}')
		i = skipSpace(tools, end)
		if tools[i] == ',' {
			i = skipSpace(tools, i+1)
		}
	}
	return append(out, ']'), nil
}

// AddCacheHints gives the result of one JSON-RPC response message the
// cache hints a client of ModernProtocolVersion expects on cacheable
// results (tools/list, prompts/list, resources/list,
// resources/templates/list, resources/read) when an upstream of an older
// revision sent none: ttlMs 0 (do not reuse it) and cacheScope "private"
// (it may depend on the caller's credentials). Hints the upstream gave are
// kept. Error responses and messages without a result object are returned
// unchanged; malformed input wraps ErrMalformed and msg is returned.
func AddCacheHints(msg []byte) ([]byte, error) {
	res, ok, err := result(msg)
	if err != nil || !ok {
		return msg, err
	}
	var rbuf [16]member
	ms, end, err := scanObject(msg, res, rbuf[:0], "result")
	if err != nil {
		return msg, err
	}
	_, hasTTL := find(ms, "ttlMs")
	_, hasScope := find(ms, "cacheScope")
	if hasTTL && hasScope {
		return msg, nil
	}
	out := make([]byte, 0, len(msg)+40)
	out = append(out, msg[:res]...)
	out = append(out, '{')
	n := 0
	for _, m := range ms {
		out = appendMember(out, n, m.key, msg[m.vs:m.ve])
		n++
	}
	if !hasTTL {
		out = appendMember(out, n, []byte("ttlMs"), []byte(`0`))
		n++
	}
	if !hasScope {
		out = appendMember(out, n, []byte("cacheScope"), []byte(`"private"`))
	}
	out = append(out, '}')
	return append(out, msg[end:]...), nil
}
