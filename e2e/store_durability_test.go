package e2e

// The production store, with real redis-server processes: replicas keep
// one owner key after Redis loses its data, an append-only Redis restarted
// under load loses no acknowledged task, taskgate follows a Sentinel
// failover and a Cluster resharding, and large results hold up no small
// operation.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/taskstore"
)

// redisPipeline sends cmds (inline commands) on one connection and returns
// the first line of each reply.
func redisPipeline(addr string, cmds ...string) ([]string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, strings.Join(cmds, "\r\n")+"\r\n"); err != nil {
		return nil, err
	}
	br := bufio.NewReader(c)
	out := make([]string, len(cmds))
	for i := range cmds {
		line, err := br.ReadString('\n')
		if err != nil {
			return out, err
		}
		out[i] = strings.TrimSpace(line)
		if strings.HasPrefix(line, "$") { // a bulk string: read its payload line
			if n, _ := strconv.Atoi(strings.TrimSpace(line[1:])); n >= 0 {
				v, err := br.ReadString('\n')
				if err != nil {
					return out, err
				}
				out[i] = strings.TrimSpace(v)
			}
		}
	}
	return out, nil
}

// metricNumber is metricValue as a number (-1 when absent).
func metricNumber(gw *gateway, name string) float64 {
	v, err := strconv.ParseFloat(metricValue(gw, name), 64)
	if err != nil {
		return -1
	}
	return v
}

// findable reports whether a task created through each replica is found
// (tasks/get succeeds) through every replica, for one bearer token.
func findable(t *testing.T, gws []*gateway, token string) (bool, string) {
	t.Helper()
	clients := make([]*rawClient, len(gws))
	for i, gw := range gws {
		c := newRawClient(t, gw.URL)
		c.header.Set("Authorization", "Bearer "+token)
		r := c.call("initialize", map[string]any{"protocolVersion": protocolVersion, "capabilities": map[string]any{},
			"clientInfo": map[string]any{"name": "e2e", "version": "1"}})
		if r.Msg.Error != nil {
			return false, fmt.Sprintf("initialize through replica %d: %s", i, r.Msg.Error.Message)
		}
		c.session = r.Header.Get("Mcp-Session-Id")
		c.version = protocolVersion
		c.notify("notifications/initialized", nil)
		clients[i] = c
	}
	for i, c := range clients {
		r := c.call("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}, "task": map[string]any{}})
		if r.Msg.Error != nil {
			return false, fmt.Sprintf("create through replica %d: %s", i, r.Msg.Error.Message)
		}
		var res struct {
			Task wireTask `json:"task"`
		}
		if err := json.Unmarshal(r.Msg.Result, &res); err != nil || res.Task.TaskID == "" {
			return false, fmt.Sprintf("create through replica %d: %s", i, r.Body)
		}
		for j, o := range clients {
			g := o.call("tasks/get", map[string]any{"taskId": res.Task.TaskID})
			if g.Msg.Error != nil {
				return false, fmt.Sprintf("task of replica %d through replica %d: %d %s", i, j, g.Msg.Error.Code, g.Msg.Error.Message)
			}
		}
	}
	return true, ""
}

// Issue 22 item 3: Redis restarted without persistence under two running
// replicas that share the owner key through Redis, and a third replica
// started right after: all three converge on one key within one lease
// period, so a task created through any replica is found through every
// other. Then a different key written into an emptied Redis (what a
// replica started first would do) is adopted by all three, each counting
// the mismatch, and /readyz/store is 200 again once they agree.
func TestOwnerKeyConvergesAfterRedisDataLoss(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	rs := newRedisServer(t, freeAddr(t), false)
	rs.start()
	up := startLegacy(t)
	url := "redis://" + rs.addr
	flags := []string{"--redis", url, "--lease", lease.String(), "--store-timeout", "1s"}
	a := startTaskgate(t, up.URL, flags...)
	b := startTaskgate(t, up.URL, flags...)
	if ok, why := findable(t, []*gateway{a, b}, "before"); !ok {
		t.Fatalf("before the restart: %s", why)
	}

	rs.stop()
	rs.start()
	restarted := time.Now()
	c := startTaskgate(t, up.URL, flags...)
	gws := []*gateway{a, b, c}
	var why string
	if err := pollUntil(10*lease, func() (bool, error) {
		var ok bool
		ok, why = findable(t, gws, "after-restart")
		return ok, nil
	}); err != nil {
		t.Fatalf("the replicas do not find each other's tasks %v after the Redis restart: %s", 10*lease, why)
	}
	t.Logf("after the Redis restart: one key on all replicas %v after the restart (lease %v); rewrites %v/%v/%v, mismatches %v/%v/%v",
		time.Since(restarted).Round(10*time.Millisecond), lease,
		metricNumber(a, "taskgate_store_owner_key_rewrites_total"), metricNumber(b, "taskgate_store_owner_key_rewrites_total"),
		metricNumber(c, "taskgate_store_owner_key_rewrites_total"),
		metricNumber(a, "taskgate_store_owner_key_mismatches_total"), metricNumber(b, "taskgate_store_owner_key_mismatches_total"),
		metricNumber(c, "taskgate_store_owner_key_mismatches_total"))

	// A different key in an emptied Redis: every replica adopts it.
	mism := make([]float64, len(gws))
	for i, gw := range gws {
		mism[i] = metricNumber(gw, "taskgate_store_owner_key_mismatches_total")
	}
	key := taskstore.SharedSecretKey("", "owner-key")
	if out, err := redisPipeline(rs.addr, "MULTI", "FLUSHALL", "SET "+key+" "+strings.Repeat("5a", 32), "EXEC"); err != nil {
		t.Fatalf("replacing the key: %v %q", err, out)
	}
	replaced := time.Now()
	waitFor(t, 10*lease, "the replicas to adopt the key found in Redis", func() bool {
		for i, gw := range gws {
			if metricNumber(gw, "taskgate_store_owner_key_mismatches_total") <= mism[i] {
				return false
			}
		}
		return true
	})
	adopted := time.Since(replaced)
	waitFor(t, 10*lease, "/readyz/store of every replica to turn 200", func() bool {
		for _, gw := range gws {
			if httpStatus(gw.Admin+"/readyz/store") != http.StatusOK {
				return false
			}
		}
		return true
	})
	if ok, why := findable(t, gws, "after-replace"); !ok {
		t.Errorf("after every replica adopted the key: %s", why)
	}
	if v, err := redisCommand(rs.addr, "GET "+key); err != nil || !strings.HasPrefix(v, "$64") {
		t.Errorf("key in Redis after the adoption: %q %v", v, err)
	}
	for i, gw := range gws {
		if !strings.Contains(gw.p.out.String(), "adopted it") {
			t.Errorf("replica %d did not log the mismatch", i)
		}
	}
	t.Logf("a different key in Redis: adopted by all replicas within %v; ready again within %v", adopted.Round(10*time.Millisecond),
		time.Since(replaced).Round(10*time.Millisecond))
}
