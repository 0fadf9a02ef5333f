package e2e

import (
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
