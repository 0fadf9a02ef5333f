package capability

import (
	"encoding/json"
	"fmt"

	"github.com/taskgate/taskgate/capability/jsonx"
)

// Rewrites for clients of MCP 2026-07-28. That revision has no initialize:
// a client learns the server's capabilities from server/discover, and the
// tasks feature is the extension ExtensionTasks, offered as
// capabilities.extensions[ExtensionTasks] = {} (never as the older
// capabilities.tasks). Every result carries a resultType, and tools have no
// execution member.

// ProtocolVersion2026 is the protocol revision of the tasks extension.
const ProtocolVersion2026 = "2026-07-28"

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
	return rewriteDiscover(msg, false)
}

// OwnDiscover is RewriteDiscover for a gateway that serves tasks itself
// even where the upstream offers the extension (the policy's ownTasks):
// the upstream's own extensions[ExtensionTasks] entry, with whatever
// settings it carries, is replaced by {} as well. native reports that the
// upstream offered the extension.
func OwnDiscover(msg []byte) (out []byte, native bool, err error) {
	return rewriteDiscover(msg, true)
}

func rewriteDiscover(msg []byte, own bool) (out []byte, native bool, err error) {
	res, ok, err := result(msg)
	if err != nil || !ok {
		return msg, false, err
	}
	var rbuf [16]jsonx.Member
	ms, _, err := scanObject(msg, res, rbuf[:0], "result")
	if err != nil {
		return msg, false, err
	}
	caps, hasCaps := jsonx.Find(ms, "capabilities")
	if !hasCaps || caps.Kind == 'n' {
		val := `{"extensions":{"` + ExtensionTasks + `":{}}}`
		if hasCaps {
			return jsonx.Splice(msg, []jsonx.Edit{{Start: caps.VS, End: caps.VE, Val: val}}), false, nil
		}
		pos, comma := jsonx.InsertAt(ms, res)
		pre := `"capabilities":`
		if comma {
			pre = `,"capabilities":`
		}
		return jsonx.Splice(msg, []jsonx.Edit{{Start: pos, End: pos, Pre: pre, Val: val}}), false, nil
	}
	newCaps, native, err := capabilities2026(msg[caps.VS:caps.VE], own)
	if err != nil || native && !own {
		return msg, native, err
	}
	return jsonx.Splice(msg, []jsonx.Edit{{Start: caps.VS, End: caps.VE, Val: string(newCaps)}}), native, nil
}

// capabilities2026 returns the server capabilities object caps (valid
// JSON) without "tasks" and with extensions[ExtensionTasks] = {}. native
// reports that caps already offers the extension (then out is nil, unless
// own: then the upstream's entry is replaced).
func capabilities2026(caps []byte, own bool) (out []byte, native bool, err error) {
	if len(caps) == 0 || caps[0] != '{' {
		return nil, false, fmt.Errorf("capability: capabilities is not an object: %w", ErrMalformed)
	}
	var cbuf, ebuf [16]jsonx.Member
	cms, _, err := scanObject(caps, 0, cbuf[:0], "capabilities")
	if err != nil {
		return nil, false, err
	}
	var ems []jsonx.Member
	if ext, ok := jsonx.Find(cms, "extensions"); ok && ext.Kind != 'n' {
		if ext.Kind != '{' {
			return nil, false, fmt.Errorf("capability: capabilities.extensions is not an object: %w", ErrMalformed)
		}
		if ems, _, err = scanObject(caps, ext.VS, ebuf[:0], "capabilities.extensions"); err != nil {
			return nil, false, err
		}
		if _, ok := jsonx.Find(ems, ExtensionTasks); ok {
			if !own {
				return nil, true, nil
			}
			native = true
		}
	}
	out = make([]byte, 0, len(caps)+64)
	out = append(out, '{')
	n := 0
	for _, m := range cms {
		if k := string(m.Key); k == "tasks" || k == "extensions" {
			continue
		}
		out = appendMember(out, n, m.Key, caps[m.VS:m.VE])
		n++
	}
	ext := make([]byte, 0, 64)
	ext = append(ext, '{')
	i := 0
	for _, m := range ems {
		if string(m.Key) == ExtensionTasks {
			continue
		}
		ext = appendMember(ext, i, m.Key, caps[m.VS:m.VE])
		i++
	}
	ext = appendMember(ext, i, []byte(ExtensionTasks), []byte("{}"))
	ext = append(ext, '}')
	out = appendMember(out, n, []byte("extensions"), ext)
	return append(out, '}'), native, nil
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
	if err := validate(init, "initialize result: "); err != nil {
		return nil, err
	}
	i := jsonx.SkipSpace(init, 0)
	if init[i] != '{' {
		return nil, fmt.Errorf("capability: initialize result is not an object: %w", ErrMalformed)
	}
	var buf [16]jsonx.Member
	ms, _, err := scanObject(init, i, buf[:0], "initialize result")
	if err != nil {
		return nil, err
	}
	caps := []byte(`{"extensions":{"` + ExtensionTasks + `":{}}}`)
	if c, ok := jsonx.Find(ms, "capabilities"); ok && c.Kind != 'n' {
		mc, native, err := capabilities2026(init[c.VS:c.VE], false)
		switch {
		case err != nil:
			return nil, err
		case native:
			mc = init[c.VS:c.VE]
		}
		caps = mc
	}
	vs, _ := json.Marshal(supportedVersions)
	out := make([]byte, 0, len(init)+128)
	out = append(out, `{"resultType":"complete","supportedVersions":`...)
	out = append(out, vs...)
	out = append(out, `,"capabilities":`...)
	out = append(out, caps...)
	if in, ok := jsonx.Find(ms, "instructions"); ok && in.Kind == '"' {
		out = append(out, `,"instructions":`...)
		out = append(out, init[in.VS:in.VE]...)
	}
	out = append(out, `,"ttlMs":0,"cacheScope":"public"`...)
	if si, ok := jsonx.Find(ms, "serverInfo"); ok && si.Kind == '{' {
		out = append(out, `,"_meta":{"`+metaServerInfo+`":`...)
		out = append(out, init[si.VS:si.VE]...)
		out = append(out, '}')
	}
	return append(out, '}'), nil
}

// Result2026 rewrites one JSON-RPC response message of an upstream of an
// older revision for a client of ProtocolVersion2026: the result gets
// resultType "complete" when it has none, and with stripExecution every
// result.tools[] element loses its execution member (the newer revision has
// none; task support is negotiated per request). Error responses and
// messages without a result object are returned unchanged; malformed input
// wraps ErrMalformed and msg is returned.
func Result2026(msg []byte, stripExecution bool) ([]byte, error) {
	res, ok, err := result(msg)
	if err != nil || !ok {
		return msg, err
	}
	var rbuf [16]jsonx.Member
	ms, end, err := scanObject(msg, res, rbuf[:0], "result")
	if err != nil {
		return msg, err
	}
	_, hasType := jsonx.Find(ms, "resultType")
	tools, hasTools := jsonx.Find(ms, "tools")
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
		val := msg[m.VS:m.VE]
		if stripExecution && hasTools && m.VS == tools.VS && m.Kind == '[' {
			if val, err = stripToolsExecution(val); err != nil {
				return msg, err
			}
		}
		out = appendMember(out, n, m.Key, val)
		n++
	}
	out = append(out, '}')
	return append(out, msg[end:]...), nil
}

// stripToolsExecution returns the tools array without each tool's execution.
func stripToolsExecution(tools []byte) ([]byte, error) {
	out := make([]byte, 0, len(tools))
	out = append(out, '[')
	var tbuf [16]jsonx.Member
	i := jsonx.SkipSpace(tools, 1)
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
			if string(m.Key) == "execution" {
				continue
			}
			out = appendMember(out, k, m.Key, tools[m.VS:m.VE])
			k++
		}
		out = append(out, '}')
		i = jsonx.SkipSpace(tools, end)
		if tools[i] == ',' {
			i = jsonx.SkipSpace(tools, i+1)
		}
	}
	return append(out, ']'), nil
}

// AddCacheHints gives the result of one JSON-RPC response message the
// cache hints a client of ProtocolVersion2026 expects on cacheable
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
	var rbuf [16]jsonx.Member
	ms, end, err := scanObject(msg, res, rbuf[:0], "result")
	if err != nil {
		return msg, err
	}
	_, hasTTL := jsonx.Find(ms, "ttlMs")
	_, hasScope := jsonx.Find(ms, "cacheScope")
	if hasTTL && hasScope {
		return msg, nil
	}
	out := make([]byte, 0, len(msg)+40)
	out = append(out, msg[:res]...)
	out = append(out, '{')
	n := 0
	for _, m := range ms {
		out = appendMember(out, n, m.Key, msg[m.VS:m.VE])
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
