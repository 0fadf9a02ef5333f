package capability

import (
	"errors"
	"testing"
)

func TestRewriteDiscover(t *testing.T) {
	tests := []struct {
		name, in, want string
		native         bool
		err            bool
	}{
		{
			name: "adds the extension, drops legacy tasks",
			in:   `{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{},"tasks":{"list":{}}}}}`,
			want: `{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{},"extensions":{"io.modelcontextprotocol/tasks":{}}}}}`,
		},
		{
			name: "keeps other extensions",
			in:   `{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"extensions":{"x/y":{"a":1}}}}}`,
			want: `{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"extensions":{"x/y":{"a":1},"io.modelcontextprotocol/tasks":{}}}}}`,
		},
		{
			name: "no capabilities",
			in:   `{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":[]}}`,
			want: `{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":[],"capabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}`,
		},
		{
			name:   "native",
			in:     `{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}`,
			want:   `{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}`,
			native: true,
		},
		{
			name: "error response unchanged",
			in:   `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}`,
			want: `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}`,
		},
		{name: "duplicate capabilities", in: `{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"tools":{},"tools":{}}}}`, err: true},
		{name: "extensions not an object", in: `{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"extensions":[]}}}`, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, native, err := RewriteDiscover([]byte(tt.in))
			if tt.err {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("RewriteDiscover(%s) error = %v, want ErrMalformed", tt.in, err)
				}
				return
			}
			if err != nil || native != tt.native || string(out) != tt.want {
				t.Fatalf("RewriteDiscover(%s) =\n %s, %v, %v\nwant\n %s, %v", tt.in, out, native, err, tt.want, tt.native)
			}
		})
	}
}

func TestDiscoverFromInitialize(t *testing.T) {
	in := `{"protocolVersion":"2025-11-25","capabilities":{"logging":{},"tools":{"listChanged":true}},"serverInfo":{"name":"s","version":"1"},"instructions":"hi"}`
	want := `{"resultType":"complete","supportedVersions":["2026-07-28","2025-11-25"],"capabilities":{"logging":{},"tools":{"listChanged":true},"extensions":{"io.modelcontextprotocol/tasks":{}}},"instructions":"hi","ttlMs":0,"cacheScope":"public","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"1"}}}`
	out, err := DiscoverFromInitialize([]byte(in), []string{"2026-07-28", "2025-11-25"})
	if err != nil || string(out) != want {
		t.Fatalf("DiscoverFromInitialize =\n %s, %v\nwant\n %s", out, err, want)
	}
	if _, err := DiscoverFromInitialize([]byte(`[1]`), nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("DiscoverFromInitialize([1]) error = %v, want ErrMalformed", err)
	}
}

func TestResult2026(t *testing.T) {
	tests := []struct {
		name, in, want string
		strip          bool
	}{
		{
			name: "adds resultType",
			in:   `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`,
			want: `{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","content":[]}}`,
		},
		{
			name: "keeps resultType",
			in:   `{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","content":[]}}`,
			want: `{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","content":[]}}`,
		},
		{
			name:  "strips execution",
			in:    `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","execution":{"taskSupport":"optional"}}, {"name":"b"}],"nextCursor":"x"}}`,
			want:  `{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","tools":[{"name":"a"},{"name":"b"}],"nextCursor":"x"}}`,
			strip: true,
		},
		{
			name: "error unchanged",
			in:   `{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}`,
			want: `{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Result2026([]byte(tt.in), tt.strip)
			if err != nil || string(out) != tt.want {
				t.Fatalf("Result2026(%s) =\n %s, %v\nwant\n %s", tt.in, out, err, tt.want)
			}
		})
	}
}

func TestAddCacheHints(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{
			name: "adds both",
			in:   `{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","tools":[]}}`,
			want: `{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","tools":[],"ttlMs":0,"cacheScope":"private"}}`,
		},
		{
			name: "empty result",
			in:   `{"jsonrpc":"2.0","id":1,"result":{}}`,
			want: `{"jsonrpc":"2.0","id":1,"result":{"ttlMs":0,"cacheScope":"private"}}`,
		},
		{
			name: "keeps the upstream's",
			in:   `{"jsonrpc":"2.0","id":1,"result":{"prompts":[],"ttlMs":60000,"cacheScope":"public"}}`,
			want: `{"jsonrpc":"2.0","id":1,"result":{"prompts":[],"ttlMs":60000,"cacheScope":"public"}}`,
		},
		{
			name: "adds the missing one",
			in:   `{"jsonrpc":"2.0","id":1,"result":{"contents":[],"ttlMs":5}}`,
			want: `{"jsonrpc":"2.0","id":1,"result":{"contents":[],"ttlMs":5,"cacheScope":"private"}}`,
		},
		{
			name: "error unchanged",
			in:   `{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}`,
			want: `{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := AddCacheHints([]byte(tt.in))
			if err != nil || string(out) != tt.want {
				t.Fatalf("AddCacheHints(%s) =\n %s, %v\nwant\n %s", tt.in, out, err, tt.want)
			}
		})
	}
	if _, err := AddCacheHints([]byte(`{"jsonrpc":"2.0","id":1,"result":{"a":1,"a":2}}`)); err == nil {
		t.Errorf("AddCacheHints of a duplicate key: no error")
	}
}

// OwnDiscover replaces an upstream's own tasks extension (and drops its
// legacy tasks capability): the gateway serves tasks.
func TestOwnDiscover(t *testing.T) {
	in := `{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"tools":{},"tasks":{"list":{}},"extensions":{"io.modelcontextprotocol/tasks":{"x":1},"x/y":{}}}}}`
	want := `{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"tools":{},"extensions":{"x/y":{},"io.modelcontextprotocol/tasks":{}}}}}`
	out, native, err := OwnDiscover([]byte(in))
	if err != nil || !native || string(out) != want {
		t.Fatalf("OwnDiscover = %s, %v, %v; want %s, true", out, native, err, want)
	}
}
