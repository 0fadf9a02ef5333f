package e2e

import (
	"encoding/json"
	"slices"
	"testing"
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
