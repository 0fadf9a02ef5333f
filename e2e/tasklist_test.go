package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/taskgate/taskgate/taskstore/redistest"
)

// T-55, Q-16 (issue 21 item 7a): one owner creates 120 tasks 20 at a time
// and then reads every tasks/list page: each task it was given is listed
// exactly once and nothing else is. With the embedded store, and with two
// replicas on one redis-server, the creates alternating between them (two
// clocks writing one owner's index) and the pages read on the second.
// --max-tasks-per-owner -1: under the default cap of 100 unfinished tasks a
// loaded machine refuses some of the 120 creates (their calls, though
// instant, have not finished yet), which this test is not about.
func TestTasksListConcurrentCreates_T55(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		gw := startTaskgate(t, up.URL, "--max-tasks-per-owner", "-1", "--task-rate", "-1", "--list-page-size", "7")
		checkListAfterBurst(t, gw, gw)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		redistest.Need(t, "redis-server")
		redisURL := "redis://" + redistest.Start(t)
		key := "e2e-list-owner-key-0123456789abc"
		flags := []string{"--redis", redisURL, "--owner-key", key, "--max-tasks-per-owner", "-1", "--task-rate", "-1", "--list-page-size", "7"}
		a := startTaskgate(t, up.URL, flags...)
		b := startTaskgate(t, up.URL, flags...)
		checkListAfterBurst(t, a, b)
	})
}

// checkListAfterBurst creates 120 tasks of one owner, 20 at a time,
// alternately on a and b, then pages through tasks/list on b.
func checkListAfterBurst(t *testing.T, a, b *gateway) {
	const total, batch = 120, 20
	clients := []*rawClient{newRawClient(t, a.URL), newRawClient(t, b.URL)}
	for _, c := range clients {
		c.header.Set("Authorization", "Bearer list-burst")
		c.initialize()
	}
	var mu sync.Mutex
	created := map[string]bool{}
	for start := 0; start < total; start += batch {
		var wg sync.WaitGroup
		for i := start; i < start+batch; i++ {
			wg.Add(1)
			go func(c *rawClient) {
				defer wg.Done()
				id, err := createTaskErr(c, "echo", map[string]any{"text": fmt.Sprint(i)})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("create %d: %v", i, err)
					return
				}
				created[id] = true
			}(clients[i%2])
		}
		wg.Wait()
	}
	if t.Failed() {
		return
	}
	seen := map[string]int{}
	var dups, foreign []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > total {
			t.Fatal("tasks/list does not end")
		}
		var params any
		if cursor != "" {
			params = map[string]any{"cursor": cursor}
		}
		var page taskPage
		clients[1].result("tasks/list", params, &page)
		for _, x := range page.Tasks {
			if seen[x.TaskID]++; seen[x.TaskID] == 2 {
				dups = append(dups, x.TaskID)
			}
			if !created[x.TaskID] {
				foreign = append(foreign, x.TaskID)
			}
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	var missing []string
	for id := range created {
		if seen[id] == 0 {
			missing = append(missing, id)
		}
	}
	sort.Strings(missing)
	if len(created) != total || len(dups)+len(foreign)+len(missing) > 0 {
		t.Errorf("created %d tasks; tasks/list: listed twice %v, listed but not created %v, missing %v",
			len(created), dups, foreign, missing)
	}
}

// createTaskErr is rawClient.createTask for other goroutines than the
// test's: it returns errors instead of failing the test.
func createTaskErr(c *rawClient, tool string, args any) (string, error) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
		"params": map[string]any{"name": tool, "arguments": args, "task": map[string]any{}}})
	req, err := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", c.session)
	req.Header.Set("MCP-Protocol-Version", c.version)
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if i := bytes.LastIndex(b, []byte("data: ")); i >= 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b = bytes.TrimSpace(b[i+len("data: "):])
	}
	var m struct {
		Result struct {
			Task struct {
				TaskID string `json:"taskId"`
			} `json:"task"`
		} `json:"result"`
		Error *rpcError `json:"error"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("HTTP %d %q: %w", resp.StatusCode, b, err)
	}
	if m.Error != nil {
		return "", fmt.Errorf("error %d %s", m.Error.Code, m.Error.Message)
	}
	if m.Result.Task.TaskID == "" {
		return "", fmt.Errorf("no task in %s", b)
	}
	return m.Result.Task.TaskID, nil
}
