package capability

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// hostileSeeds are inputs meant to confuse a rewrite: duplicate keys,
// odd-cased and NUL-suffixed keys, deep nesting, huge strings, non-objects
// and invalid UTF-8.
func hostileSeeds() []string {
	deep := func(n int) string {
		return `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"x":` +
			strings.Repeat(`[`, n) + strings.Repeat(`]`, n) + `},"tools":[{"name":"d","inputSchema":` +
			strings.Repeat(`{"a":`, n) + `1` + strings.Repeat(`}`, n) + `}]}}`
	}
	huge := strings.Repeat(`\"x\\`, 1<<14)
	return []string{
		`{"result":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{},"tasks":{}}}}`,
		`{"result":{"protocolVersion":"2025-11-25","capabilities":{"Tasks":{}},"Capabilities":{}}}`,
		`{"Result":{"protocolVersion":"2025-11-25"},"result":{"protocolVersion":"2025-06-18"}}`,
		"{\"result\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{\"tasks\\u0000\":{}}}}",
		"{\"result\x00\":{},\"result\":{\"tools\":[{\"name\x00\":\"a\",\"name\":\"b\"}]}}",
		`{"result":{"tools":[{"name":"a","NAME":"b","Name":"c","execution":{"taskSupport":"forbidden","TaskSupport":"x"}}]}}`,
		`{"result":{"tools":[{"name":"a"},{"name":"a"},{"nam\u0065":"b","execution":null}]}}`,
		`{"result":{"tools":[{"name":"a","name":"b"}]}}`,
		deep(100),
		deep(9990),
		deep(10000),
		`{"result":{"protocolVersion":"2025-11-25","instructions":"` + huge + `","tools":[{"name":"` + huge + `"}]}}`,
		`[{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}]`,
		`[]`, `null`, `"x"`, `1`, ``, ` `, `{`, `}`, `{}`,
		"{\"result\":{\"protocolVersion\":\"2025-11-25\xff\",\"tools\":[{\"name\":\"\xfe\xff\"}],\"capabilities\":{\"\xff\":1}}}",
		"{\"result\":{\"k\xff\":1,\"k\xfe\":2}}",
		`{"result":{"protocolVersion":"2025-11-25","capabilities":{}},"error":null}`,
		`{"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}}` + "\n\t ",
		`{"result":{"protocolVersion":"1999-99-99","capabilities":{}}}`,
		`{"result":{"protocolVersion":"","capabilities":{}}}`,
		`{"result":{"tools":[{"name":"\ud800","execution":{"taskSupport":"forbidden"}}]}}`,
	}
}

// realSeeds are the real-shaped samples.
func realSeeds() []string {
	return []string{goSDKInit, tsSDKInit, prettyInit, goSDKTools, tsSDKTools, prettyTools, string(bigToolsList(3))}
}

func FuzzRewriteInitialize(f *testing.F) {
	for _, s := range append(realSeeds(), hostileSeeds()...) {
		for _, opt := range []InitOptions{{}, {List: true, Bridge: true}} {
			f.Add([]byte(s), opt.List, opt.Bridge)
		}
	}
	f.Fuzz(func(t *testing.T, msg []byte, list, bridge bool) {
		opt := InitOptions{List: list, Bridge: bridge}
		orig := bytes.Clone(msg)
		out, info, err := RewriteInitialize(msg, opt)
		if !bytes.Equal(msg, orig) {
			t.Fatalf("RewriteInitialize modified its input")
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("RewriteInitialize(%q) error = %v, want %v", msg, err, ErrMalformed)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("RewriteInitialize(%q) = %q, not valid JSON", msg, out)
		}
		if !info.Injected && !bytes.Equal(out, msg) {
			t.Fatalf("RewriteInitialize(%q) = %q, changed without injecting", msg, out)
		}
		if info.Bridged && !info.Injected {
			t.Fatalf("RewriteInitialize(%q) bridged without injecting", msg)
		}
		checkInitProperty(t, msg, out, info, opt)
	})
}

func FuzzRewriteToolsList(f *testing.F) {
	for _, s := range append(realSeeds(), hostileSeeds()...) {
		f.Add([]byte(s))
	}
	support := func(name string) string {
		return [...]string{"forbidden", "optional", "required"}[len(name)%3]
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		orig := bytes.Clone(msg)
		out, err := RewriteToolsList(msg, support)
		if !bytes.Equal(msg, orig) {
			t.Fatalf("RewriteToolsList modified its input")
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("RewriteToolsList(%q) error = %v, want %v", msg, err, ErrMalformed)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("RewriteToolsList(%q) = %q, not valid JSON", msg, out)
		}
		// Every named tool has the requested taskSupport, and nothing else
		// changed.
		checkToolsProperty(t, msg, out, support)
	})
}
