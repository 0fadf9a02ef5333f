package e2e

// Progress and log messages of plain (non-task) 2026-07-28 calls: on the
// call's own response, before its result, as a 2026 server sends them.

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// modernTools are the two real upstreams of legacy-mcp's plain tools
// (slow, stats): the 2025 era, which taskgate bridges, and the 2026 era,
// which it passes through.
var modernTools = []struct {
	name string
	args []string
}{
	{"upstream2025", nil},
	{"upstream2026", []string{"--stateless", "--max-protocol-version", modernVersion}},
}

// TestModernPlainCallProgress (M-34, M-32): a plain 2026 tools/call with a
// progressToken and a logLevel gets the tool's progress (each step, with
// its token) and its log messages on its own SSE answer, before the
// result, in front of either upstream era. The progress comes while the
// call runs: a client that reads the first one of a 60-second call and
// closes the stream gets the call cancelled at the upstream.
func TestModernPlainCallProgress(t *testing.T) {
	for _, era := range modernTools {
		t.Run(era.name, func(t *testing.T) {
			up := startLegacy(t, era.args...)
			gw := startTaskgate(t, up.URL)
			c := newModernClient(t, gw.URL, map[string]any{})
			checkProgress(t, c)

			// Without a logLevel no log message comes; progress still does.
			r, _ := c.send("tools/call", map[string]any{"name": "slow", "arguments": map[string]any{"seconds": 0.1, "steps": 2},
				"_meta": map[string]any{"progressToken": 7}}, "slow", nil)
			progress, logs := 0, 0
			for _, n := range r.Notes {
				switch n.Method {
				case "notifications/progress":
					progress++
				case "notifications/message":
					logs++
				}
			}
			if progress != 2 || logs != 0 || r.Msg == nil || r.Msg.Error != nil {
				t.Errorf("without a logLevel: %d progress, %d log messages, answer %s; want 2, 0 and the result", progress, logs, r.Body)
			}

			if era.name == "upstream2025" {
				// A client that declares elicitation: in front of a 2025
				// upstream its plain call runs as a task it never sees
				// (so that a question can become an InputRequiredResult);
				// the notifications reach it all the same.
				checkProgress(t, newModernClient(t, gw.URL, map[string]any{"elicitation": map[string]any{}}))
				// The progress is streamed while the call runs: read the
				// first, leave, and the upstream sees the call cancelled.
				for _, caps := range []map[string]any{{}, {"elicitation": map[string]any{}}} {
					checkStreamed(t, c, up.URL, caps)
				}
			}
		})
	}
}

// checkProgress calls slow (3 steps) with a progressToken and logLevel
// info and checks the notifications and result on the answer.
func checkProgress(t *testing.T, c *modernClient) {
	t.Helper()
	r, id := c.send("tools/call", map[string]any{"name": "slow", "arguments": map[string]any{"seconds": 0.3, "steps": 3},
		"_meta": map[string]any{"progressToken": "prog-1", "io.modelcontextprotocol/logLevel": "info"}}, "slow", nil)
	if r.Status != http.StatusOK || r.Msg == nil || r.Msg.Error != nil || string(r.Msg.ID) != string(id) {
		t.Fatalf("slow with a progressToken: HTTP %d %s", r.Status, r.Body)
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "text/event-stream") {
		t.Errorf("Content-Type %q, want an SSE answer carrying the notifications", r.Header.Get("Content-Type"))
	}
	var steps []string
	logs := 0
	for _, n := range r.Notes {
		switch n.Method {
		case "notifications/progress":
			var p struct {
				ProgressToken string  `json:"progressToken"`
				Progress      float64 `json:"progress"`
				Message       string  `json:"message"`
			}
			if err := json.Unmarshal(n.Params, &p); err != nil || p.ProgressToken != "prog-1" {
				t.Errorf("progress %s: want the request's token", n.Params)
			}
			steps = append(steps, p.Message)
		case "notifications/message":
			logs++
		}
	}
	if strings.Join(steps, ",") != "step 1 of 3,step 2 of 3,step 3 of 3" || logs != 3 {
		t.Errorf("notifications before the result: progress %q, %d log messages; want the 3 steps and 3 log messages", steps, logs)
	}
	var res struct {
		ResultType string `json:"resultType"`
		toolResult
	}
	if err := json.Unmarshal(r.Msg.Result, &res); err != nil || res.ResultType != "complete" || res.text() != "slept 0.3 seconds" {
		t.Errorf("result %s, want the complete tool result", r.Msg.Result)
	}
}

// checkStreamed starts a 60 s slow call with a progressToken (the request
// declaring caps), reads the first event of its answer, closes it, and
// waits for the upstream to see the call cancelled: the progress came while
// the call ran, and closing the stream cancelled it.
func checkStreamed(t *testing.T, c *modernClient, upstreamURL string, caps map[string]any) {
	t.Helper()
	stats := newStatsReader(t, upstreamURL)
	before := stats.get().Cancelled
	body, _ := c.marshalRequest("tools/call", map[string]any{"name": "slow", "arguments": map[string]any{"seconds": 60, "steps": 60},
		"_meta": map[string]any{"progressToken": "long", metaVersionKey: modernVersion, metaCapsKey: caps}})
	req := c.request(t.Context(), http.MethodPost, body)
	req.Header.Set("MCP-Protocol-Version", modernVersion)
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "slow")
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := newSSEReader(resp.Body).next()
	if err != nil || !strings.Contains(ev.Data, `"notifications/progress"`) || !strings.Contains(ev.Data, `"long"`) {
		t.Fatalf("first event of a 60 s call (capabilities %v): %q, %v; want its first progress", caps, ev.Data, err)
	}
	resp.Body.Close()
	waitFor(t, 20*time.Second, "the upstream to see the call cancelled", func() bool { return stats.get().Cancelled > before })
}
