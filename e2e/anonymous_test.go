package e2e

// Callers without credentials on the 2026-07-28 bridge: no request without
// Authorization meets upstream state another request created (each gets an
// upstream session of its own, see proxy/anonymous.md), while a caller with
// credentials keeps its session across requests, and the tasks an
// anonymous request creates stay readable by their id and are listed to
// nobody else.

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
)

// thoughtHistoryLength calls the sequential-thinking server's tool once
// and returns how many thoughts the server holds for the caller's session.
func thoughtHistoryLength(t *testing.T, c *modernClient, n int) int {
	t.Helper()
	var res struct {
		ResultType        string `json:"resultType"`
		StructuredContent struct {
			ThoughtHistoryLength int `json:"thoughtHistoryLength"`
		} `json:"structuredContent"`
	}
	c.ok("tools/call", map[string]any{"name": "sequentialthinking", "arguments": map[string]any{
		"thought": "step", "thoughtNumber": n, "totalThoughts": 5, "nextThoughtNeeded": true,
	}}, "sequentialthinking", &res)
	if res.ResultType != "complete" || res.StructuredContent.ThoughtHistoryLength == 0 {
		t.Fatalf("sequentialthinking: %+v, want a complete result with thoughtHistoryLength", res)
	}
	return res.StructuredContent.ThoughtHistoryLength
}

// TestModernAnonymousIsolation (M-35): four separate 2026 clients without
// Authorization, in front of a stateful stdio server (the reference
// sequential-thinking server keeps every thought of its session): each
// sees only its own thought, whether it declares nothing, elicitation
// (its call then runs as a task it never sees) or the tasks extension; a
// second request of the same anonymous client is a new caller too. Two
// requests with the same credentials share their state; another
// credential does not see it.
func TestModernAnonymousIsolation(t *testing.T) {
	t.Parallel()
	bin := npmBin(t)
	gw := startStdioGateway(t, filepath.Join(bin, "mcp-server-sequential-thinking"),
		"--upstream-env", "DISABLE_THOUGHT_LOGGING=true")
	clients := []*modernClient{
		newModernClient(t, gw.URL, map[string]any{}),
		newModernClient(t, gw.URL, map[string]any{"elicitation": map[string]any{}}),
		newModernClient(t, gw.URL, withTasks()),
		newModernClient(t, gw.URL, map[string]any{}),
	}
	var got []int
	for _, c := range clients {
		got = append(got, thoughtHistoryLength(t, c, 1))
	}
	got = append(got, thoughtHistoryLength(t, clients[0], 2))
	if !slices.Equal(got, []int{1, 1, 1, 1, 1}) {
		t.Errorf("thoughtHistoryLength of anonymous requests = %v, want 1 each (no request sees another's thoughts)", got)
	}

	alice := newModernClient(t, gw.URL, map[string]any{})
	alice.header.Set("Authorization", "Bearer alice-token")
	bob := newModernClient(t, gw.URL, map[string]any{})
	bob.header.Set("Authorization", "Bearer bob-token")
	if a1, a2, b1 := thoughtHistoryLength(t, alice, 1), thoughtHistoryLength(t, alice, 2), thoughtHistoryLength(t, bob, 1); a1 != 1 || a2 != 2 || b1 != 1 {
		t.Errorf("with credentials: alice %d then %d, bob %d; want 1, 2 (one session per credential) and 1", a1, a2, b1)
	}
}

// TestModernAnonymousTasks: a task an anonymous 2026 request creates in
// front of a 2025 upstream runs to its end in its own upstream session
// (closed only when the call ends), stays readable and cancellable through
// its id by a later request without credentials (the id, 128 random bits,
// is the capability), is unknown to a caller with credentials, and appears
// in no 2025 tasks/list (an anonymous session's or a credential's).
func TestModernAnonymousTasks(t *testing.T) {
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL, "--promote-window", "50ms")
	creator := newModernClient(t, gw.URL, withTasks())
	var tk detailedTask
	creator.ok("tools/call", map[string]any{"name": "slow", "arguments": map[string]any{"seconds": 1, "steps": 2}}, "slow", &tk)
	if tk.ResultType != "task" {
		t.Fatalf("slow through an anonymous request = %+v, want a task", tk)
	}
	later := newModernClient(t, gw.URL, withTasks())
	done := later.waitModern(tk.TaskID, "completed", statusIs("completed"))
	if done.Result == nil || done.Result.text() != "slept 1 seconds" {
		t.Errorf("the anonymous task's result read by id = %+v", done.Result)
	}

	authed := newModernClient(t, gw.URL, withTasks())
	authed.header.Set("Authorization", "Bearer someone")
	authed.fails("tasks/get", map[string]any{"taskId": tk.TaskID}, tk.TaskID, nil, 200, -32602)

	for name, auth := range map[string]string{"anonymous session": "", "credential": "Bearer someone"} {
		c := newRawClient(t, gw.URL)
		if auth != "" {
			c.header.Set("Authorization", auth)
		}
		c.initialize()
		r := c.call("tasks/list", map[string]any{})
		if r.Msg == nil {
			t.Fatalf("tasks/list (%s): HTTP %d %s", name, r.Status, r.Body)
		}
		var page taskPage
		if r.Msg.Result != nil {
			if err := json.Unmarshal(r.Msg.Result, &page); err != nil {
				t.Fatal(err)
			}
		}
		for _, lt := range page.Tasks {
			if lt.TaskID == tk.TaskID {
				t.Errorf("tasks/list of a 2025 %s lists the anonymous 2026 request's task", name)
			}
		}
	}

	// Another anonymous request cancels a running task by its id.
	creator.ok("tools/call", map[string]any{"name": "slow", "arguments": map[string]any{"seconds": 60}}, "slow", &tk)
	later.ok("tasks/cancel", map[string]any{"taskId": tk.TaskID}, tk.TaskID, nil)
	later.waitModern(tk.TaskID, "cancelled", statusIs("cancelled"))
}
