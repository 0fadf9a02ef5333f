package capability

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// optional is the default support function (P-02).
func optional(string) string { return "optional" }

func TestRewriteToolsList(t *testing.T) {
	perTool := func(name string) string {
		switch name {
		case "search", "echo":
			return "required"
		case "fetch":
			return "forbidden"
		}
		return "optional"
	}
	tests := []struct {
		name      string
		in        string
		support   func(string) string
		want      string // "" means: output equals input
		wantNames []string
	}{
		{
			name:      "E-04 P-02 Go SDK page keeps every member and nextCursor",
			in:        goSDKTools,
			support:   optional,
			want:      strings.NewReplacer(`"sizes":["48x48"]}]}`, `"sizes":["48x48"]}],"execution":{"taskSupport":"optional"}}`, `"name":"fetch"}`, `"name":"fetch","execution":{"taskSupport":"optional"}}`).Replace(goSDKTools),
			wantNames: []string{"search", "fetch"},
		},
		{
			name:      "T-08 T-09 T-10 per-tool values",
			in:        goSDKTools,
			support:   perTool,
			want:      strings.NewReplacer(`"sizes":["48x48"]}]}`, `"sizes":["48x48"]}],"execution":{"taskSupport":"required"}}`, `"name":"fetch"}`, `"name":"fetch","execution":{"taskSupport":"forbidden"}}`).Replace(goSDKTools),
			wantNames: []string{"search", "fetch"},
		},
		{
			name:      "T-08 existing forbidden from the TS SDK is overridden",
			in:        tsSDKTools,
			support:   perTool,
			want:      strings.NewReplacer(`{"taskSupport":"forbidden"}},`, `{"taskSupport":"optional"}},`, `{"taskSupport":"forbidden"},"annotations"`, `{"taskSupport":"required"},"annotations"`).Replace(tsSDKTools),
			wantNames: []string{"build_report", "echo"},
		},
		{
			name:      "existing value equal to the wanted one is kept",
			in:        tsSDKTools,
			support:   func(string) string { return "forbidden" },
			wantNames: []string{"build_report", "echo"},
		},
		{
			name:    "pretty-printed, execution with other members",
			in:      prettyTools,
			support: optional,
			want: strings.NewReplacer(
				`"x-extra": true`, `"x-extra": true,"execution":{"taskSupport":"optional"}`,
				`{ "x-mode": "fast" }`, `{ "x-mode": "fast","taskSupport":"optional" }`,
			).Replace(prettyTools),
			wantNames: []string{"a", "b"},
		},
		{
			name:      "execution null is replaced",
			in:        `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"n","inputSchema":{},"execution":null}]}}`,
			support:   optional,
			want:      `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"n","inputSchema":{},"execution":{"taskSupport":"optional"}}]}}`,
			wantNames: []string{"n"},
		},
		{
			name:      "empty execution gets no leading comma",
			in:        `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"n","execution":{}}]}}`,
			support:   optional,
			want:      `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"n","execution":{"taskSupport":"optional"}}]}}`,
			wantNames: []string{"n"},
		},
		{
			name:      "escaped name is unescaped for support",
			in:        `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"n\u0061me":"s\u00e9arch\"x","inputSchema":{}}]}}`,
			support:   func(name string) string { return map[string]string{`séarch"x`: "required"}[name] },
			want:      `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"n\u0061me":"s\u00e9arch\"x","inputSchema":{},"execution":{"taskSupport":"required"}}]}}`,
			wantNames: []string{`séarch"x`},
		},
		{
			name:    "support value is JSON-escaped",
			in:      `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"n"}]}}`,
			support: func(string) string { return `o"pt` },
			want:    `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"n","execution":{"taskSupport":"o\"pt"}}]}}`,
		},
		{
			name:      "tool without string name is unchanged",
			in:        `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"title":"anonymous"},{"name":7},{"name":null},{"name":"ok"}]}}`,
			support:   optional,
			want:      `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"title":"anonymous"},{"name":7},{"name":null},{"name":"ok","execution":{"taskSupport":"optional"}}]}}`,
			wantNames: []string{"ok"},
		},
		{
			name:    "odd-cased Execution and TaskSupport are other keys",
			in:      `{"result":{"tools":[{"name":"n","Execution":{"taskSupport":"required"}},{"name":"m","execution":{"TaskSupport":"required"}}]}}`,
			support: optional,
			want:    `{"result":{"tools":[{"name":"n","Execution":{"taskSupport":"required"},"execution":{"taskSupport":"optional"}},{"name":"m","execution":{"TaskSupport":"required","taskSupport":"optional"}}]}}`,
		},
		{
			name:    "empty tools is unchanged",
			in:      `{"jsonrpc":"2.0","id":1,"result":{"tools":[ ],"nextCursor":"x"}}`,
			support: optional,
		},
		{
			name:    "result without tools is unchanged",
			in:      `{"jsonrpc":"2.0","id":1,"result":{}}`,
			support: optional,
		},
		{
			name:    "error response is unchanged",
			in:      `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}`,
			support: optional,
		},
		{
			name:    "request is unchanged",
			in:      `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"x"}}`,
			support: optional,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotNames []string
			support := func(name string) string {
				gotNames = append(gotNames, name)
				return tt.support(name)
			}
			got, err := RewriteToolsList([]byte(tt.in), support)
			if err != nil {
				t.Fatalf("RewriteToolsList(%q) error = %v", tt.in, err)
			}
			want := tt.want
			if want == "" {
				want = tt.in
			}
			if diff := cmp.Diff(want, string(got)); diff != "" {
				t.Errorf("RewriteToolsList(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
			if tt.wantNames != nil {
				if diff := cmp.Diff(tt.wantNames, gotNames); diff != "" {
					t.Errorf("RewriteToolsList(%q) support calls mismatch (-want +got):\n%s", tt.in, diff)
				}
			}
			if !json.Valid(got) {
				t.Errorf("RewriteToolsList(%q) = %q, not valid JSON", tt.in, got)
			}
			checkToolsProperty(t, []byte(tt.in), got, tt.support)
		})
	}
}

// TestRewriteToolsListPages is E-04/E-05: every page, and every re-fetch
// after notifications/tools/list_changed, is rewritten the same way.
func TestRewriteToolsListPages(t *testing.T) {
	pages := []string{
		`{"jsonrpc":"2.0","id":10,"result":{"tools":[{"name":"a","inputSchema":{"type":"object"}}],"nextCursor":"p2"}}`,
		`{"jsonrpc":"2.0","id":11,"result":{"tools":[{"name":"b","inputSchema":{"type":"object"}}]}}`,
	}
	for round := range 2 {
		for _, p := range pages {
			got, err := RewriteToolsList([]byte(p), optional)
			if err != nil {
				t.Fatalf("round %d: RewriteToolsList(%q) error = %v", round, p, err)
			}
			checkToolsProperty(t, []byte(p), got, optional)
			if !strings.Contains(string(got), `"execution":{"taskSupport":"optional"}`) {
				t.Errorf("round %d: RewriteToolsList(%q) = %q, no taskSupport", round, p, got)
			}
		}
	}
}

func TestRewriteToolsListMalformed(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{name: "empty", in: ``},
		{name: "not JSON", in: `{"result":{"tools":[`},
		{name: "top-level array", in: `[]`},
		{name: "NUL byte in key", in: "{\"result\":{\"tools\x00\":[]}}"},
		{name: "result not an object", in: `{"result":"tools"}`},
		{name: "tools not an array", in: `{"result":{"tools":{}}}`},
		{name: "tools null", in: `{"result":{"tools":null}}`},
		{name: "tool not an object", in: `{"result":{"tools":[{"name":"a"},"b"]}}`},
		{name: "execution not an object", in: `{"result":{"tools":[{"name":"a","execution":"optional"}]}}`},
		{name: "duplicate tools", in: `{"result":{"tools":[],"tools":[{"name":"a"}]}}`},
		{name: "duplicate name in tool", in: `{"result":{"tools":[{"name":"a","name":"b"}]}}`},
		{name: "duplicate escaped name in tool", in: `{"result":{"tools":[{"name":"a","\u006eame":"b"}]}}`},
		{name: "duplicate execution in tool", in: `{"result":{"tools":[{"name":"a","execution":{},"execution":{"taskSupport":"required"}}]}}`},
		{name: "duplicate taskSupport", in: `{"result":{"tools":[{"name":"a","execution":{"taskSupport":"forbidden","taskSupport":"forbidden"}}]}}`},
		{name: "duplicate key in a large tool", in: `{"result":{"tools":[{"name":"a","k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k3":3}]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RewriteToolsList([]byte(tt.in), optional)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("RewriteToolsList(%q) error = %v, want %v", tt.in, err, ErrMalformed)
			}
			if string(got) != tt.in {
				t.Errorf("RewriteToolsList(%q) = %q on error, want input", tt.in, got)
			}
		})
	}
}

func TestRewriteToolsListBig(t *testing.T) {
	in := bigToolsList(300)
	got, err := RewriteToolsList(in, optional)
	if err != nil {
		t.Fatal(err)
	}
	checkToolsProperty(t, in, got, optional)
}

// checkToolsProperty checks that in and out, decoded into map[string]any,
// differ only in execution.taskSupport of tools with a string name, which
// is support(name) in out.
func checkToolsProperty(t *testing.T, in, out []byte, support func(string) string) {
	t.Helper()
	var mi, mo map[string]any
	if err := json.Unmarshal(in, &mi); err != nil {
		return // json.Unmarshal refuses what json.Valid accepts only past its depth limit
	}
	if err := json.Unmarshal(out, &mo); err != nil {
		t.Fatalf("output %q does not decode: %v", out, err)
	}
	if _, ok := mi["error"]; !ok {
		res, _ := mi["result"].(map[string]any)
		tools, _ := res["tools"].([]any)
		for _, v := range tools {
			tool := v.(map[string]any)
			name, ok := tool["name"].(string)
			if !ok {
				continue
			}
			ex, _ := tool["execution"].(map[string]any)
			if ex == nil {
				ex = map[string]any{}
				tool["execution"] = ex
			}
			ex["taskSupport"] = support(name)
		}
	}
	// equalJSON first: cmp is very slow on deeply nested values.
	if equalJSON(mi, mo) {
		return
	}
	if diff := cmp.Diff(mi, mo); diff != "" {
		t.Errorf("RewriteToolsList(%q) = %q changed more than expected (-want +got):\n%s", in, out, diff)
	}
}

// equalJSON reports whether two values decoded by encoding/json into any
// are equal.
func equalJSON(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			w, ok := b[k]
			if !ok || !equalJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !equalJSON(a[i], b[i]) {
				return false
			}
		}
		return true
	default: // string, float64, bool, nil
		return a == b
	}
}
