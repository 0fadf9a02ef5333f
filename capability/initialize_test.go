package capability

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRewriteInitialize(t *testing.T) {
	const tasks = `"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}`
	const tasksNoList = `"tasks":{"cancel":{},"requests":{"tools":{"call":{}}}}`
	tests := []struct {
		name     string
		in       string
		opt      InitOptions
		want     string // "" means: output equals input
		wantInfo InitInfo
	}{
		{
			name:     "E-01 T-01 T-02 Go SDK 2025-11-25 injects with list",
			in:       goSDKInit,
			opt:      InitOptions{List: true},
			want:     strings.Replace(goSDKInit, `"tools":{"listChanged":true}}`, `"tools":{"listChanged":true},`+tasks+`}`, 1),
			wantInfo: InitInfo{UpstreamVersion: "2025-11-25", Injected: true},
		},
		{
			name:     "E-06 T-76 no list without identifiable requestors",
			in:       goSDKInit,
			want:     strings.Replace(goSDKInit, `"tools":{"listChanged":true}}`, `"tools":{"listChanged":true},`+tasksNoList+`}`, 1),
			wantInfo: InitInfo{UpstreamVersion: "2025-11-25", Injected: true},
		},
		{
			name:     "E-03 Q-12 2025-06-18 without Bridge is unchanged",
			in:       tsSDKInit,
			opt:      InitOptions{List: true},
			wantInfo: InitInfo{UpstreamVersion: "2025-06-18"},
		},
		{
			name: "E-03 Q-12 2025-06-18 with Bridge is bridged",
			in:   tsSDKInit,
			opt:  InitOptions{List: true, Bridge: true},
			want: strings.NewReplacer(
				`"protocolVersion":"2025-06-18"`, `"protocolVersion":"2025-11-25"`,
				`"experimental":{"x-trace":{}}}`, `"experimental":{"x-trace":{}},`+tasks+`}`,
			).Replace(tsSDKInit),
			wantInfo: InitInfo{UpstreamVersion: "2025-06-18", Injected: true, Bridged: true},
		},
		{
			name:     "Q-12 2024-11-05 with Bridge is bridged",
			in:       `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},"serverInfo":{"name":"old","version":"0.1"}}}`,
			opt:      InitOptions{Bridge: true},
			want:     `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},` + tasksNoList + `},"serverInfo":{"name":"old","version":"0.1"}}}`,
			wantInfo: InitInfo{UpstreamVersion: "2024-11-05", Injected: true, Bridged: true},
		},
		{
			name:     "Q-12 2024-11-05 without Bridge is unchanged",
			in:       `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},"serverInfo":{"name":"old","version":"0.1"}}}`,
			wantInfo: InitInfo{UpstreamVersion: "2024-11-05"},
		},
		{
			name:     "L-05 newer version than 2025-11-25 is unchanged even with Bridge",
			in:       `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2026-07-28","capabilities":{"tools":{}},"serverInfo":{"name":"new","version":"2"}}}`,
			opt:      InitOptions{List: true, Bridge: true},
			wantInfo: InitInfo{UpstreamVersion: "2026-07-28"},
		},
		{
			name:     "Bridge ignores a version that is not YYYY-MM-DD",
			in:       `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"draft","capabilities":{}}}`,
			opt:      InitOptions{Bridge: true},
			wantInfo: InitInfo{UpstreamVersion: "draft"},
		},
		{
			name:     "Bridge ignores a missing version",
			in:       `{"jsonrpc":"2.0","id":1,"result":{"capabilities":{}}}`,
			opt:      InitOptions{Bridge: true},
			wantInfo: InitInfo{},
		},
		{
			name:     "E-02 P-01 upstream with tasks is unchanged even with Bridge",
			in:       `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{"cancel":{}},"tools":{}},"serverInfo":{"name":"modern","version":"1"}}}`,
			opt:      InitOptions{List: true, Bridge: true},
			wantInfo: InitInfo{UpstreamHasTasks: true, UpstreamVersion: "2025-11-25"},
		},
		{
			name:     "E-02 P-01 upstream with tasks at an older version is unchanged even with Bridge",
			in:       `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{},"tasks":{}}}}`,
			opt:      InitOptions{Bridge: true},
			wantInfo: InitInfo{UpstreamHasTasks: true, UpstreamVersion: "2025-06-18"},
		},
		{
			name:     "ownTasks replaces the upstream's tasks capability in place",
			in:       `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}},"tools":{}},"serverInfo":{"name":"everything","version":"1"}}}`,
			opt:      InitOptions{OwnTasks: true},
			want:     `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{` + tasksNoList + `,"tools":{}},"serverInfo":{"name":"everything","version":"1"}}}`,
			wantInfo: InitInfo{UpstreamHasTasks: true, UpstreamVersion: "2025-11-25", Injected: true},
		},
		{
			name:     "ownTasks with list and an odd tasks value",
			in:       `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"tasks":null}}}`,
			opt:      InitOptions{OwnTasks: true, List: true},
			want:     `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},` + tasks + `}}}`,
			wantInfo: InitInfo{UpstreamHasTasks: true, UpstreamVersion: "2025-11-25", Injected: true},
		},
		{
			name:     "ownTasks with an older version and Bridge bridges",
			in:       `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{"tasks":{}}}}`,
			opt:      InitOptions{OwnTasks: true, Bridge: true},
			want:     `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{` + tasksNoList + `}}}`,
			wantInfo: InitInfo{UpstreamHasTasks: true, UpstreamVersion: "2025-06-18", Injected: true, Bridged: true},
		},
		{
			name:     "P-01 escaped key t\\u0061sks counts as tasks",
			in:       `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"t\u0061sks":{}}}}`,
			opt:      InitOptions{List: true},
			wantInfo: InitInfo{UpstreamHasTasks: true, UpstreamVersion: "2025-11-25"},
		},
		{
			name:     "odd-cased Tasks is not tasks: ours is added last",
			in:       `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"Tasks":{}}}}`,
			want:     `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"Tasks":{},` + tasksNoList + `}}}`,
			wantInfo: InitInfo{UpstreamVersion: "2025-11-25", Injected: true},
		},
		{
			name:     "pretty-printed input keeps its layout, _meta and unknown members",
			in:       prettyInit,
			opt:      InitOptions{List: true},
			want:     strings.Replace(prettyInit, "\"tools\": {}\n", "\"tools\": {},"+tasks+"\n", 1),
			wantInfo: InitInfo{UpstreamVersion: "2025-11-25", Injected: true},
		},
		{
			name:     "capabilities absent is created at the end of result",
			in:       `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","serverInfo":{"name":"bare","version":"1"}}}`,
			want:     `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","serverInfo":{"name":"bare","version":"1"},"capabilities":{` + tasksNoList + `}}}`,
			wantInfo: InitInfo{UpstreamVersion: "2025-11-25", Injected: true},
		},
		{
			name:     "capabilities null is replaced",
			in:       `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":null}}`,
			want:     `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{` + tasksNoList + `}}}`,
			wantInfo: InitInfo{UpstreamVersion: "2025-11-25", Injected: true},
		},
		{
			name:     "empty capabilities get no leading comma",
			in:       `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{ }}}`,
			want:     `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{` + tasksNoList + ` }}}`,
			wantInfo: InitInfo{UpstreamVersion: "2025-11-25", Injected: true},
		},
		{
			name:     "escaped protocolVersion is unescaped",
			in:       `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-2\u0035","capabilities":{}}}`,
			want:     `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-2\u0035","capabilities":{` + tasksNoList + `}}}`,
			wantInfo: InitInfo{UpstreamVersion: "2025-11-25", Injected: true},
		},
		{
			name: "error response is unchanged",
			in:   `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Unsupported protocol version","data":{"supported":["2024-11-05"],"requested":"2025-11-25"}}}`,
			opt:  InitOptions{List: true, Bridge: true},
		},
		{
			name: "message without result is unchanged",
			in:   `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`,
			opt:  InitOptions{List: true, Bridge: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, info, err := RewriteInitialize([]byte(tt.in), tt.opt)
			if err != nil {
				t.Fatalf("RewriteInitialize(%q, %+v) error = %v", tt.in, tt.opt, err)
			}
			want := tt.want
			if want == "" {
				want = tt.in
			}
			if diff := cmp.Diff(want, string(got)); diff != "" {
				t.Errorf("RewriteInitialize(%q, %+v) output mismatch (-want +got):\n%s", tt.in, tt.opt, diff)
			}
			if diff := cmp.Diff(tt.wantInfo, info); diff != "" {
				t.Errorf("RewriteInitialize(%q, %+v) info mismatch (-want +got):\n%s", tt.in, tt.opt, diff)
			}
			if !json.Valid(got) {
				t.Errorf("RewriteInitialize(%q, %+v) = %q, not valid JSON", tt.in, tt.opt, got)
			}
			checkInitProperty(t, []byte(tt.in), got, info, tt.opt)
		})
	}
}

func TestRewriteInitializeMalformed(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{name: "empty", in: ``},
		{name: "not JSON", in: `{"jsonrpc":`},
		{name: "top-level array (batch)", in: `[{"jsonrpc":"2.0","id":1,"result":{}}]`},
		{name: "top-level string", in: `"result"`},
		{name: "trailing garbage", in: `{"result":{}} x`},
		{name: "result not an object", in: `{"jsonrpc":"2.0","id":1,"result":[]}`},
		{name: "result null", in: `{"jsonrpc":"2.0","id":1,"result":null}`},
		{name: "capabilities not an object", in: `{"result":{"protocolVersion":"2025-11-25","capabilities":[]}}`},
		{name: "protocolVersion not a string", in: `{"result":{"protocolVersion":20251125,"capabilities":{}}}`},
		{name: "duplicate result", in: `{"result":{},"result":{"protocolVersion":"2025-11-25"}}`},
		{name: "duplicate escaped result", in: `{"result":{},"r\u0065sult":{}}`},
		{name: "duplicate capabilities", in: `{"result":{"capabilities":{"tasks":{}},"capabilities":{}}}`},
		{name: "duplicate tasks hides a capability", in: `{"result":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{},"tasks":{}}}}`},
		{name: "duplicate protocolVersion", in: `{"result":{"protocolVersion":"2025-06-18","protocolVersion":"2025-11-25"}}`},
		{name: "duplicate error", in: `{"error":{},"error":{}}`},
		{name: "invalid UTF-8 keys that decode alike", in: "{\"result\":{\"k\xff\":1,\"k\xfe\":2}}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := RewriteInitialize([]byte(tt.in), InitOptions{List: true, Bridge: true})
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("RewriteInitialize(%q) error = %v, want %v", tt.in, err, ErrMalformed)
			}
			if string(got) != tt.in {
				t.Errorf("RewriteInitialize(%q) = %q on error, want input", tt.in, got)
			}
		})
	}
}

// TestRewriteInitializeAliasing checks the input is never modified and an
// unchanged message is returned as is.
func TestRewriteInitializeAliasing(t *testing.T) {
	in := []byte(goSDKInit)
	got, _, err := RewriteInitialize(in, InitOptions{List: true})
	if err != nil {
		t.Fatal(err)
	}
	if string(in) != goSDKInit {
		t.Errorf("RewriteInitialize modified its input: %q", in)
	}
	got[0] = 'X'
	if string(in) != goSDKInit {
		t.Errorf("RewriteInitialize output aliases its input")
	}
	in = []byte(tsSDKInit)
	got, _, _ = RewriteInitialize(in, InitOptions{})
	if &got[0] != &in[0] {
		t.Errorf("RewriteInitialize copied an unchanged message")
	}
}

// checkInitProperty checks that in and out, decoded into map[string]any,
// differ only in result.capabilities.tasks and, when bridged,
// result.protocolVersion.
func checkInitProperty(t *testing.T, in, out []byte, info InitInfo, opt InitOptions) {
	t.Helper()
	var mi, mo map[string]any
	if err := json.Unmarshal(in, &mi); err != nil {
		return // json.Unmarshal refuses what json.Valid accepts only past its depth limit
	}
	if err := json.Unmarshal(out, &mo); err != nil {
		t.Fatalf("output %q does not decode: %v", out, err)
	}
	if info.Injected {
		res := mi["result"].(map[string]any)
		caps, _ := res["capabilities"].(map[string]any)
		if caps == nil {
			caps = map[string]any{}
			res["capabilities"] = caps
		}
		tasks := map[string]any{
			"cancel":   map[string]any{},
			"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}},
		}
		if opt.List {
			tasks["list"] = map[string]any{}
		}
		caps["tasks"] = tasks
		if info.Bridged {
			res["protocolVersion"] = ProtocolVersion
		}
	}
	// equalJSON first: cmp is very slow on deeply nested values.
	if equalJSON(mi, mo) {
		return
	}
	if diff := cmp.Diff(mi, mo); diff != "" {
		t.Errorf("RewriteInitialize(%q) = %q changed more than expected (-want +got):\n%s", in, out, diff)
	}
}
