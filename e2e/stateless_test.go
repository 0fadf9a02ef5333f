package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestModernRemovedMethods: through the bridge to a 2025-era upstream, the
// methods 2026-07-28 removed (the 2025 upstream still has them) and a
// method neither revision defines are HTTP 404 with -32601 on the 2026
// wire, with the request's id (M-30); a 2025 session on the same taskgate
// still has them.
func TestModernRemovedMethods(t *testing.T) {
	up := startLegacy(t, "--fixtures")
	gw := startTaskgate(t, up.URL, "--config", conformancePolicy(t))
	c := newModernClient(t, gw.URL, map[string]any{})
	for _, m := range []string{"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe", "unknown/method"} {
		params := map[string]any{}
		if m == "resources/subscribe" || m == "resources/unsubscribe" {
			params["uri"] = "test://x"
		}
		c.fails(m, params, "", nil, 404, -32601)
	}
	// An initialize without the 2026 _meta is of the 2025 era, whatever
	// its header: the upstream answers it (this one refuses the header).
	init := newRawClient(t, gw.URL)
	body, _ := init.marshalRequest("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "t", "version": "1"}})
	req := init.request(t.Context(), http.MethodPost, body)
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	if r := init.do(req); r.Msg == nil || r.Msg.Error != nil && strings.HasPrefix(r.Msg.Error.Message, "taskgate:") {
		t.Errorf("a 2025 initialize with a 2026 header: HTTP %d %s, want the upstream's answer", r.Status, r.Body)
	}
	// A 2025 session keeps ping and logging/setLevel.
	s := newRawClient(t, gw.URL)
	s.initialize()
	for _, m := range []string{"ping", "logging/setLevel"} {
		var params map[string]any
		if m == "logging/setLevel" {
			params = map[string]any{"level": "info"}
		}
		if r := s.call(m, params); r.Msg == nil || r.Msg.Error != nil {
			t.Errorf("2025 session %s = HTTP %d %s, want a result", m, r.Status, r.Body)
		}
	}
}

// TestModernUndeclaredCapability: a plain 2026 call whose 2025 upstream
// asks for a client capability the request did not declare gets
// 400/-32021 with data.requiredCapabilities naming it; the upstream's call
// is told to stop, and the same call declaring the capability is asked the
// question instead (M-31). In front of a 2026 upstream the upstream's own
// -32021 passes through.
func TestModernUndeclaredCapability(t *testing.T) {
	for _, era := range upstreamEras {
		t.Run(era.name, func(t *testing.T) {
			up := startLegacy(t, append(slices.Clone(era.args), "--diagnostics")...)
			gw := startTaskgate(t, up.URL, "--config", conformancePolicy(t))
			bare := newModernClient(t, gw.URL, map[string]any{})
			e := bare.fails("tools/call", map[string]any{"name": "test_missing_capability", "arguments": map[string]any{}},
				"test_missing_capability", nil, 400, -32021)
			var data struct {
				RequiredCapabilities map[string]json.RawMessage `json:"requiredCapabilities"`
			}
			if err := json.Unmarshal(e.Data, &data); err != nil || string(data.RequiredCapabilities["sampling"]) != "{}" {
				t.Errorf("-32021 data = %s, want requiredCapabilities {sampling: {}}", e.Data)
			}
			var round1 detailedTask
			c := newModernClient(t, gw.URL, map[string]any{"sampling": map[string]any{}})
			c.ok("tools/call", map[string]any{"name": "test_missing_capability", "arguments": map[string]any{}}, "test_missing_capability", &round1)
			if round1.ResultType != "input_required" || len(round1.InputRequests) != 1 {
				t.Errorf("declaring sampling: %+v, want an InputRequiredResult with one sampling request", round1)
			}
		})
	}
}

// listenStream is an open subscriptions/listen stream; msgs gets each of
// its messages.
type listenStream struct {
	msgs chan map[string]any
}

// openListen opens subscriptions/listen with the notifications filter
// and the request id id, declaring caps.
func openListen(t *testing.T, endpoint string, id int, filter, caps map[string]any) *listenStream {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": map[string]any{
		"notifications": filter,
		"_meta":         map[string]any{metaVersionKey: modernVersion, metaCapsKey: caps},
	}})
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", modernVersion)
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("subscriptions/listen: HTTP %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	ls := &listenStream{msgs: make(chan map[string]any, 16)}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data:")
			if !ok {
				continue
			}
			var m map[string]any
			if json.Unmarshal([]byte(strings.TrimSpace(data)), &m) == nil {
				ls.msgs <- m
			}
		}
	}()
	return ls
}

// next returns the stream's next message.
func (ls *listenStream) next(t *testing.T, what string) map[string]any {
	t.Helper()
	select {
	case m := <-ls.msgs:
		return m
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s on the listen stream", what)
		return nil
	}
}

func subscriptionID(m map[string]any) any {
	p, _ := m["params"].(map[string]any)
	meta, _ := p["_meta"].(map[string]any)
	return meta["io.modelcontextprotocol/subscriptionId"]
}

// TestModernListen: subscriptions/listen through taskgate in front of
// either upstream era: the first message acknowledges what the upstream
// offers among what was asked for, a tool list change reaches the stream
// that asked for it tagged with the listen request's id, and not the one
// that asked for prompts only (M-33). A filter naming taskIds without the
// tasks extension is 400/-32021 (M-26).
func TestModernListen(t *testing.T) {
	for _, era := range upstreamEras {
		t.Run(era.name, func(t *testing.T) {
			up := startLegacy(t, append(slices.Clone(era.args), "--diagnostics")...)
			gw := startTaskgate(t, up.URL, "--config", conformancePolicy(t))
			c := newModernClient(t, gw.URL, map[string]any{})
			c.fails("subscriptions/listen", map[string]any{"notifications": map[string]any{"taskIds": []string{"x"}}}, "", nil, 400, -32021)

			tools := openListen(t, gw.URL, 71, map[string]any{"toolsListChanged": true, "promptsListChanged": true}, map[string]any{})
			prompts := openListen(t, gw.URL, 72, map[string]any{"promptsListChanged": true}, map[string]any{})
			for name, ls := range map[string]*listenStream{"tools": tools, "prompts": prompts} {
				ack := ls.next(t, "acknowledgement")
				p, _ := ack["params"].(map[string]any)
				if ack["method"] != "notifications/subscriptions/acknowledged" || subscriptionID(ack) == nil {
					t.Fatalf("%s stream: first message %v, want a tagged acknowledgement", name, ack)
				}
				n, _ := p["notifications"].(map[string]any)
				if _, ok := n["promptsListChanged"]; ok {
					t.Errorf("%s stream: acknowledged %v, but the upstream offers no prompt list changes", name, n)
				}
				if want := name == "tools"; (n["toolsListChanged"] == true) != want {
					t.Errorf("%s stream: acknowledged %v", name, n)
				}
			}
			for i := range 2 {
				c.ok("tools/call", map[string]any{"name": "test_trigger_tool_change", "arguments": map[string]any{}}, "test_trigger_tool_change", nil)
				m := tools.next(t, "tools/list_changed")
				if m["method"] != "notifications/tools/list_changed" || subscriptionID(m) != float64(71) {
					t.Fatalf("change %d: tools stream got %v, want tools/list_changed tagged 71", i, m)
				}
			}
			// (A 2026 upstream may end a stream with nothing to send with
			// its result at once.)
			for len(prompts.msgs) > 0 {
				if m := <-prompts.msgs; m["method"] != nil {
					t.Errorf("prompts-only stream got %v", m)
				}
			}
		})
	}
}

// failedChecks returns the ids of the failed checks in a run.sh line's
// rest ("... [failed: a, b]"), sorted and without repeats.
func failedChecks(rest string) []string {
	_, list, ok := strings.Cut(rest, "[failed: ")
	if !ok {
		return nil
	}
	list, _, _ = strings.Cut(list, "]")
	ids := strings.Split(list, ", ")
	slices.Sort(ids)
	return slices.Compact(ids)
}

// TestConformanceStateless runs the 2026-07-28 server-stateless scenario
// of the official conformance suite (e2e/testdata/conformance/run.sh)
// through taskgate in front of each upstream era (legacy-mcp --fixtures
// --diagnostics), and the 2026-era upstream alone. Through taskgate every
// check passes but one that is the upstream's:
// sep-2575-server-declares-prompts-in-discover fails because the SDK
// under legacy-mcp answers prompts/list with an empty list although it
// declares no prompts capability; it fails the same way with the 2026-era
// upstream alone, which also fails sep-2575-server-unsupported-version-error
// (its -32022 has no data.supported; taskgate answers that error itself).
func TestConformanceStateless(t *testing.T) {
	script := conformanceScript(t, "conformance")
	const scenario = "server-stateless"
	upstreamFails := []string{"sep-2575-server-declares-prompts-in-discover"}
	check := func(t *testing.T, url, label string, want []string) {
		t.Helper()
		res, out := runConformanceScript(t, script, url, label, scenario)
		t.Logf("%s %s:\n%s", scenario, label, out)
		r, ok := res[scenario]
		if !ok || r.passed == 0 {
			t.Fatalf("%s: no checks ran", label)
		}
		if got := failedChecks(r.rest); !slices.Equal(got, want) {
			t.Errorf("%s: %d passed, %d failed %v; want exactly %v failed", label, r.passed, r.failed, got, want)
		}
	}
	for _, era := range upstreamEras {
		t.Run(era.name, func(t *testing.T) {
			up := startLegacy(t, append(slices.Clone(era.args), "--diagnostics")...)
			gw := startTaskgate(t, up.URL, "--config", conformancePolicy(t), "--log-level", "warn")
			check(t, gw.URL, era.name+"-stateless-taskgate", upstreamFails)
			if era.name == "upstream2026" {
				check(t, up.URL, era.name+"-stateless-alone",
					append(slices.Clone(upstreamFails), "sep-2575-server-unsupported-version-error"))
			}
		})
	}
}

// TestModernLogging: a 2026 call that sets _meta logLevel gets the
// upstream's log messages at that level and above on its response stream,
// before the result; one without logLevel gets none (M-32). In front of a
// 2025 upstream taskgate relays them from the upstream session; a 2026
// upstream sends them itself.
func TestModernLogging(t *testing.T) {
	for _, era := range upstreamEras {
		t.Run(era.name, func(t *testing.T) {
			up := startLegacy(t, append(slices.Clone(era.args), "--diagnostics")...)
			gw := startTaskgate(t, up.URL, "--config", conformancePolicy(t))
			c := newModernClient(t, gw.URL, map[string]any{})
			levels := func(logLevel string) []string {
				params := map[string]any{"name": "test_logging_tool", "arguments": map[string]any{}}
				if logLevel != "" {
					params["_meta"] = map[string]any{"io.modelcontextprotocol/logLevel": logLevel}
				}
				r, _ := c.send("tools/call", params, "test_logging_tool", nil)
				if r.Status != http.StatusOK || r.Msg == nil || r.Msg.Error != nil {
					t.Fatalf("test_logging_tool (logLevel %q): HTTP %d %s", logLevel, r.Status, r.Body)
				}
				var got []string
				for _, n := range r.Notes {
					var p struct {
						Level string `json:"level"`
					}
					if n.Method == "notifications/message" && json.Unmarshal(n.Params, &p) == nil {
						got = append(got, p.Level)
					}
				}
				return got
			}
			if got := levels(""); len(got) != 0 {
				t.Errorf("without logLevel: log messages %v, want none", got)
			}
			if got := levels("info"); !slices.Equal(got, []string{"info", "warning"}) {
				t.Errorf("logLevel info: log messages %v, want [info warning]", got)
			}
			if got := levels("debug"); !slices.Equal(got, []string{"debug", "info", "warning"}) {
				t.Errorf("logLevel debug: log messages %v, want [debug info warning]", got)
			}
		})
	}
}

// TestModernURLElicitation: a 2025 upstream's -32042 (URL elicitation
// required) never reaches a 2026 client (M-12): a request declaring
// elicitation gets an InputRequiredResult with the URL as a URL-mode
// elicitation/create (mode, message, url; no elicitationId), and its retry
// is the upstream's next call; one without elicitation gets 400/-32021
// naming elicitation.
func TestModernURLElicitation(t *testing.T) {
	up := startLegacy(t, "--fixtures", "--diagnostics")
	gw := startTaskgate(t, up.URL, "--config", conformancePolicy(t))
	call := func() map[string]any {
		return map[string]any{"name": "test_url_elicitation", "arguments": map[string]any{}}
	}
	bare := newModernClient(t, gw.URL, map[string]any{})
	e := bare.fails("tools/call", call(), "test_url_elicitation", nil, 400, -32021)
	if !strings.Contains(string(e.Data), `"elicitation"`) {
		t.Errorf("-32021 data %s, want requiredCapabilities naming elicitation", e.Data)
	}
	// The upstream has now answered -32042 once: a fresh upstream.
	up = startLegacy(t, "--fixtures", "--diagnostics")
	gw = startTaskgate(t, up.URL, "--config", conformancePolicy(t))
	c := newModernClient(t, gw.URL, map[string]any{"elicitation": map[string]any{}})
	var round1 detailedTask
	c.ok("tools/call", call(), "test_url_elicitation", &round1)
	if round1.ResultType != "input_required" || len(round1.InputRequests) != 1 {
		t.Fatalf("round 1 = %+v, want an InputRequiredResult with one URL elicitation", round1)
	}
	for k, raw := range round1.InputRequests {
		var q struct {
			Method string         `json:"method"`
			Params map[string]any `json:"params"`
		}
		if err := json.Unmarshal(raw, &q); err != nil || q.Method != "elicitation/create" || q.Params["mode"] != "url" ||
			q.Params["url"] != "https://example.com/authorize" || q.Params["message"] != "Authorize the demo" || q.Params["elicitationId"] != nil {
			t.Errorf("inputRequests[%s] = %s, want a URL-mode elicitation/create without elicitationId", k, raw)
		}
		var res struct {
			ResultType string `json:"resultType"`
			toolResult
		}
		retry := map[string]any{"name": "test_url_elicitation", "arguments": map[string]any{},
			"inputResponses": map[string]any{k: map[string]any{"action": "accept"}}}
		c.ok("tools/call", retry, "test_url_elicitation", &res)
		if res.ResultType != "complete" || res.text() != "authorized" {
			t.Errorf("retry = %+v, want the upstream's result", res)
		}
	}
}
