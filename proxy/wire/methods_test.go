package wire

import (
	"testing"
)

// TestMetricMethodLabels: the labels are the method table's names plus the
// pseudo-methods; anything else is "other".
func TestMetricMethodLabels(t *testing.T) {
	known := []string{"", "batch", "get_stream", MethodInitialize, MethodToolsList, MethodToolsCall, MethodTasksGet,
		MethodTasksResult, MethodTasksList, MethodTasksCancel, MethodPing,
		"notifications/initialized", NotificationCancelled, "resources/list", "resources/read",
		"resources/templates/list", "prompts/list", "prompts/get", "completion/complete",
		"logging/setLevel", "notifications/progress", "notifications/roots/list_changed",
		MethodDiscover, MethodTasksUpdate, MethodSubscriptionsListen, "resources/subscribe", "resources/unsubscribe"}
	for _, m := range known {
		if got := MetricLabel(m); got != m {
			t.Errorf("MetricLabel(%q) = %q, want itself", m, got)
		}
	}
	for _, m := range []string{"x", "Tools/call", "tools/call ", "sampling/createMessage", "elicitation/create"} {
		if got := MetricLabel(m); got != "other" {
			t.Errorf("MetricLabel(%q) = %q, want other", m, got)
		}
	}
	if len(methods) != len(known)-3 {
		t.Errorf("the method table has %d entries, the test knows %d methods", len(methods), len(known)-3)
	}
}

// TestMethodTable: entries are unique, named, labelled and found. (Each
// era's test checks its own column against the table.)
func TestMethodTable(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range methods {
		if s.Name == "" || s.Metric == "" {
			t.Errorf("entry %+v: no name or metric label", s)
		}
		if seen[s.Name] {
			t.Errorf("%s: listed twice", s.Name)
		}
		seen[s.Name] = true
		if Lookup([]byte(s.Name)) == nil || Lookup([]byte(s.Name)).Name != s.Name {
			t.Errorf("%s: Lookup does not find it", s.Name)
		}
		if s.Always && s.BatchOK {
			t.Errorf("%s: always served, yet allowed in batches", s.Name)
		}
	}
	if Lookup([]byte("nope")) != nil {
		t.Errorf("Lookup found an unknown method")
	}
}

// TestLookupMethodAllocs: finding a method's entry allocates nothing.
func TestLookupMethodAllocs(t *testing.T) {
	b := []byte(MethodTasksCancel)
	u := []byte("unknown/method")
	if n := testing.AllocsPerRun(100, func() { _ = Lookup(b); _ = Lookup(u) }); n != 0 {
		t.Errorf("Lookup allocates %v times", n)
	}
}
