package proxy

import (
	"testing"
)

// TestMetricMethodLabels: the labels are the method table's names plus the
// pseudo-methods; anything else is "other".
func TestMetricMethodLabels(t *testing.T) {
	known := []string{"", "batch", "get_stream", methodInitialize, methodToolsList, methodToolsCall, methodTasksGet,
		methodTasksResult, methodTasksList, methodTasksCancel, methodPing,
		"notifications/initialized", notificationCancelled, "resources/list", "resources/read",
		"resources/templates/list", "prompts/list", "prompts/get", "completion/complete",
		"logging/setLevel", "notifications/progress", "notifications/roots/list_changed",
		methodDiscover, methodTasksUpdate}
	for _, m := range known {
		if got := metricMethod(m); got != m {
			t.Errorf("metricMethod(%q) = %q, want itself", m, got)
		}
	}
	for _, m := range []string{"x", "Tools/call", "tools/call ", "sampling/createMessage", "elicitation/create"} {
		if got := metricMethod(m); got != "other" {
			t.Errorf("metricMethod(%q) = %q, want other", m, got)
		}
	}
	if len(methods) != len(known)-3 {
		t.Errorf("the method table has %d entries, the test knows %d methods", len(methods), len(known)-3)
	}
}

// TestMethodTable: entries are unique, named, labelled; the flags that
// only mean something with a handler have one.
func TestMethodTable(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range methods {
		if s.name == "" || s.metric == "" {
			t.Errorf("entry %+v: no name or metric label", s)
		}
		if seen[s.name] {
			t.Errorf("%s: listed twice", s.name)
		}
		seen[s.name] = true
		if lookupMethod([]byte(s.name)) == nil || lookupMethod([]byte(s.name)).name != s.name {
			t.Errorf("%s: lookupMethod does not find it", s.name)
		}
		if s.serve == none && (s.tasksOnly || s.needsID || s.always) {
			t.Errorf("%s: 2025 flags without a 2025 handler", s.name)
		}
		if s.serve == none && !s.batchOK {
			t.Errorf("%s: refused in batches but passed through alone", s.name)
		}
		if s.serve26 == serveInitialize || s.serve26 == serveToolsList || s.serve26 == serveCancelled {
			t.Errorf("%s: a 2025-only handler on the 2026 wire", s.name)
		}
		if s.serve == serveDiscover || s.serve == serveNotIn2026 {
			t.Errorf("%s: a 2026-only handler on the 2025 wire", s.name)
		}
		if s.not2026 && s.serve26 != none {
			t.Errorf("%s: not2026 with a 2026 handler", s.name)
		}
	}
	if lookupMethod([]byte("nope")) != nil {
		t.Errorf("lookupMethod found an unknown method")
	}
}

// TestLookupMethodAllocs: finding a method's entry allocates nothing.
func TestLookupMethodAllocs(t *testing.T) {
	b := []byte(methodTasksCancel)
	u := []byte("unknown/method")
	if n := testing.AllocsPerRun(100, func() { _ = lookupMethod(b); _ = lookupMethod(u) }); n != 0 {
		t.Errorf("lookupMethod allocates %v times", n)
	}
}
