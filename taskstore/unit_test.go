package taskstore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/taskgate/taskgate/taskstore/redistest"
)

func TestNewID_T17_T20(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{32}$`)
	seen := make(map[string]bool, 10000)
	for range 10000 {
		id, err := NewID()
		if err != nil {
			t.Fatal(err)
		}
		if !re.MatchString(id) {
			t.Fatalf("NewID() = %q, want 32 lowercase hex chars", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		seen[id] = true
	}
}

func TestKeysShareOwnerSlot(t *testing.T) {
	k := keys{prefix: "taskgate"}
	owner, id := "abc123", "0123456789abcdef0123456789abcdef"
	for _, key := range []string{k.task(owner, id), k.index(owner), k.live(owner), k.events(owner, id), k.taskPrefix(owner) + id,
		k.queue(owner, id), k.inbox(owner, id), k.listening(owner, id), k.sessQueued(owner, "s1"), k.sessEvents(owner, "s1"),
		k.pending(owner, "s1", `"{x}"`), k.sessListeners(owner), k.queuePrefix(owner) + id, k.inboxPrefix(owner) + id, k.eventsPrefix(owner) + id} {
		if tag := key[strings.IndexByte(key, '{') : strings.IndexByte(key, '}')+1]; tag != "{"+owner+"}" {
			t.Errorf("key %q has hash tag %q, want {%s}", key, tag, owner)
		}
	}
	if got, want := k.task(owner, id), "taskgate:{abc123}:task:"+id; got != want {
		t.Errorf("task key = %q, want %q", got, want)
	}
	if strings.Contains(k.session("secret-session"), "secret") {
		t.Errorf("session key %q embeds the raw session id", k.session("secret-session"))
	}
	o, i, ok := parseLeaseMember(leaseMember("own/er", id))
	if !ok || o != "own/er" || i != id {
		t.Errorf("parseLeaseMember round trip = %q %q %v", o, i, ok)
	}
	for _, bad := range []string{"", "noslash", "owner/", "/" + id, "ow{ner/" + id} {
		if _, _, ok := parseLeaseMember(bad); ok {
			t.Errorf("parseLeaseMember(%q) ok, want refused", bad)
		}
	}
}

func TestCursor_T56(t *testing.T) {
	s, err := NewRedis(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), Config{CursorKey: []byte("0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.rdb.Close()
	id := "0123456789abcdef0123456789abcdef"
	c := s.sealCursor("alice", 1700000000123, id)
	if score, gotID, ok := s.openCursor("alice", c); !ok || score != 1700000000123 || gotID != id {
		t.Fatalf("openCursor(sealCursor) = %d %q %v", score, gotID, ok)
	}
	if _, _, ok := s.openCursor("bob", c); ok {
		t.Errorf("cursor accepted for another owner")
	}
	raw, _ := base64.RawURLEncoding.DecodeString(c)
	for i := range raw {
		b := append([]byte(nil), raw...)
		b[i] ^= 0x40
		if _, _, ok := s.openCursor("alice", base64.RawURLEncoding.EncodeToString(b)); ok {
			t.Errorf("cursor with byte %d flipped accepted", i)
		}
	}
	other, err := NewRedis(s.rdb, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := other.openCursor("alice", c); ok {
		t.Errorf("cursor accepted by a store with a random key")
	}
	if _, err := NewRedis(s.rdb, Config{CursorKey: []byte("short")}); err == nil {
		t.Errorf("NewRedis accepted a 5-byte CursorKey")
	}
	for _, p := range []string{"a{b", "a}b", "a b", "a/b"} {
		if _, err := NewRedis(s.rdb, Config{Prefix: p}); err == nil {
			t.Errorf("NewRedis accepted prefix %q", p)
		}
	}
	if n := testing.AllocsPerRun(100, func() { s.openCursor("alice", c) }); n > 12 {
		t.Errorf("openCursor allocs = %v, want <= 12", n)
	}
}

func TestOpen(t *testing.T) {
	tests := []struct {
		url     string
		want    string // client type
		addrs   []string
		db      int
		user    string
		pass    string
		master  string
		wantErr bool
	}{
		{url: "redis://localhost:6390/2", want: "*redis.Client", addrs: []string{"localhost:6390"}, db: 2},
		{url: "rediss://u:p%40ss@h:1?read_timeout=2s", want: "*redis.Client", addrs: []string{"h:1"}, user: "u", pass: "p@ss"},
		{url: "redis+cluster://:pw@h1:7000,h2:7001,h3:7002", want: "*redis.ClusterClient", addrs: []string{"h1:7000", "h2:7001", "h3:7002"}, pass: "pw"},
		{url: "redis+sentinel://:pw@s1:26379,s2:26379/mymaster/3?sentinel_password=sp", want: "failover", addrs: []string{"s1:26379", "s2:26379"}, db: 3, pass: "pw", master: "mymaster"},
		{url: "redis+sentinel://s1:26379", wantErr: true},
		{url: "http://x", wantErr: true},
		{url: "localhost:6379", wantErr: true},
		{url: "redis://h:1?bogus=1", wantErr: true},
	}
	for _, tt := range tests {
		c, err := Open(tt.url)
		if tt.wantErr {
			if err == nil {
				c.Close()
				t.Errorf("Open(%q) = nil error, want error", tt.url)
			} else if strings.Contains(err.Error(), "pw") {
				t.Errorf("Open(%q) error leaks the password: %v", tt.url, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Open(%q) = %v", tt.url, err)
			continue
		}
		switch c := c.(type) {
		case *redis.ClusterClient:
			o := c.Options()
			if tt.want != "*redis.ClusterClient" || strings.Join(o.Addrs, ",") != strings.Join(tt.addrs, ",") || o.Password != tt.pass ||
				!o.ContextTimeoutEnabled || o.ReadTimeout != DefaultReadTimeout || o.DialTimeout != DefaultDialTimeout {
				t.Errorf("Open(%q) = cluster %+v", tt.url, o)
			}
		case *redis.Client:
			o := c.Options()
			if !o.ContextTimeoutEnabled || o.DialTimeout != DefaultDialTimeout || o.WriteTimeout != DefaultWriteTimeout {
				t.Errorf("Open(%q): timeouts/ContextTimeoutEnabled not set: %+v", tt.url, o)
			}
			if tt.want == "*redis.Client" && (o.Addr != tt.addrs[0] || o.DB != tt.db || o.Username != tt.user || o.Password != tt.pass) {
				t.Errorf("Open(%q) = addr %s db %d user %q pass %q", tt.url, o.Addr, o.DB, o.Username, o.Password)
			}
			if tt.url == "rediss://u:p%40ss@h:1?read_timeout=2s" && (o.ReadTimeout != 2*time.Second || o.TLSConfig == nil) {
				t.Errorf("Open(%q): read timeout %v, TLS %v", tt.url, o.ReadTimeout, o.TLSConfig != nil)
			}
		default:
			t.Errorf("Open(%q) = %T", tt.url, c)
		}
		c.Close()
	}
	// The sentinel rewrite, checked on the parsed FailoverOptions.
	u, err := multiHostURL("redis", ":pw@s1:26379,s2:26379/mymaster/3?sentinel_password=sp&pool_size=5", sentinelRewrite)
	if err != nil {
		t.Fatal(err)
	}
	o, err := redis.ParseFailoverURL(u)
	if err != nil {
		t.Fatalf("ParseFailoverURL(%q) = %v", u, err)
	}
	if o.MasterName != "mymaster" || strings.Join(o.SentinelAddrs, ",") != "s1:26379,s2:26379" || o.DB != 3 ||
		o.Password != "pw" || o.SentinelPassword != "sp" || o.PoolSize != 5 {
		t.Errorf("sentinel URL %q parsed to %+v", u, o)
	}
}

func TestKeysDistinct(t *testing.T) {
	k := keys{prefix: "taskgate"}
	owner, id, sess := "o", "0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef"
	seen := map[string]string{}
	for name, key := range map[string]string{
		"task": k.task(owner, id), "index": k.index(owner), "live": k.live(owner), "events": k.events(owner, id),
		"queue": k.queue(owner, id), "inbox": k.inbox(owner, id), "listening": k.listening(owner, id),
		"sessQueued": k.sessQueued(owner, sess), "sessEvents": k.sessEvents(owner, sess),
		"pending": k.pending(owner, sess, "1"), "pending2": k.pending(owner, sess, "2"), "pendingNoSess": k.pending(owner, "", "1"),
		"session": k.session(sess), "leases": k.leases(), "sessListeners": k.sessListeners(owner),
	} {
		if other, ok := seen[key]; ok {
			t.Errorf("keys %s and %s are both %q", name, other, key)
		}
		seen[key] = name
	}
	if p := k.pending(owner, sess, "\n{raw}\x00"); strings.ContainsAny(p[strings.LastIndexByte(p, ':')+1:], "{}\n\x00") {
		t.Errorf("pending key %q embeds the raw request id", p)
	}
}

func TestSessWatcherOverflow(t *testing.T) {
	w := &sessWatcher{ch: make(chan SessionEvent, 4)}
	ev := func(i int) SessionEvent { return SessionEvent{'q', fmt.Sprint("t", i)} }
	for i := range 10 {
		w.deliver(ev(i))
	}
	// Three events, then 'r' in the last slot; the rest dropped.
	want := []SessionEvent{ev(0), ev(1), ev(2), {Kind: 'r'}}
	var got []SessionEvent
	for len(w.ch) > 1 {
		got = append(got, <-w.ch)
		w.deliver(ev(99)) // dropped while the 'r' is unread
	}
	got = append(got, <-w.ch)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// Once the 'r' was read, events flow again.
	w.deliver(ev(100))
	if e := <-w.ch; e != ev(100) {
		t.Errorf("after the re-scan: %+v, want %+v", e, ev(100))
	}
	// A reconnect 'r' also coalesces what follows until it is read.
	w.deliver(SessionEvent{Kind: 'r'})
	w.deliver(ev(101))
	if n := len(w.ch); n != 1 {
		t.Errorf("after 'r' and an event: %d queued, want 1", n)
	}
}

func TestParseSessionEvent(t *testing.T) {
	id := "0123456789abcdef0123456789abcdef"
	tests := []struct {
		in   string
		want SessionEvent
		ok   bool
	}{
		{"q:" + id, SessionEvent{'q', id}, true},
		{"s:" + id, SessionEvent{'s', id}, true},
		{"r:" + id, SessionEvent{}, false},
		{"q:", SessionEvent{}, false},
		{"q" + id, SessionEvent{}, false},
		{"q:a}b", SessionEvent{}, false},
		{"", SessionEvent{}, false},
		{"u", SessionEvent{}, false},
	}
	for _, tt := range tests {
		got, ok := parseSessionEvent(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseSessionEvent(%q) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// Open's clients dial connections go-redis cannot peek at (no per-command
// health-check system call); a pooled connection the server closed is then
// found by the next command, which go-redis retries on a new connection.
func TestOpenOpaqueDialerSurvivesServerClose(t *testing.T) {
	u := redistest.URL(t)
	c, err := Open(u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, ok := c.(*redis.Client)
	if !ok {
		t.Fatalf("Open(%q) = %T, want *redis.Client", u, c)
	}
	ctx := testCtx(t)
	conn, err := rc.Options().Dialer(ctx, "tcp", rc.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, peekable := conn.(syscall.Conn); peekable {
		t.Error("Open's dialer returns a syscall.Conn; go-redis would health-check it before every command")
	}
	conn.Close()

	s, err := NewRedis(c, Config{Prefix: uniquePrefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	killer := redis.NewClient(&redis.Options{Addr: rc.Options().Addr, Username: rc.Options().Username, Password: rc.Options().Password})
	defer killer.Close()
	for i := range 3 {
		task := newTask(ownerA)
		if err := s.Create(ctx, task, CreateOptions{}); err != nil {
			t.Fatalf("round %d: Create after the server closed the pooled connections: %v", i, err)
		}
		if got, err := s.Get(ctx, ownerA, task.ID); err != nil || got.Status != Working {
			t.Fatalf("round %d: Get = %+v, %v", i, got, err)
		}
		// The server drops every other client, including c's pooled connections.
		if n, err := killer.ClientKillByFilter(ctx, "TYPE", "normal").Result(); err != nil || n == 0 {
			t.Fatalf("round %d: CLIENT KILL = %d, %v", i, n, err)
		}
	}
}

// Concurrent reads share pipelines (readBatcher): every caller gets its own
// task back, and reads queued while a batch runs go out together.
func TestReadBatching(t *testing.T) {
	for name, b := range map[string]func(testing.TB) *backend{"miniredis": miniBackend, "redis-server": redisServer(t)} {
		t.Run(name, func(t *testing.T) {
			be := b(t)
			s := be.open(t, Config{}).(*Redis)
			ctx := testCtx(t)
			tasks := make([]*Task, 32)
			for i := range tasks {
				tasks[i] = newTask(ownerA)
				tasks[i].Tool = fmt.Sprintf("tool-%d", i)
				if err := s.Create(ctx, tasks[i], CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			// Hold the readers' first batches until more reads are queued.
			hook := &holdHook{release: make(chan struct{}), held: make(chan struct{}, 1)}
			s.rdb.AddHook(hook)
			errs := make(chan error, len(tasks))
			for _, task := range tasks {
				go func() {
					got, err := s.Get(ctx, ownerA, task.ID)
					if err == nil && (got.ID != task.ID || got.Tool != task.Tool) {
						err = fmt.Errorf("Get(%s) = task %s tool %s, want tool %s", task.ID, got.ID, got.Tool, task.Tool)
					}
					errs <- err
				}()
			}
			select {
			case <-hook.held:
			case <-time.After(5 * time.Second):
				close(hook.release)
				t.Fatal("no read went out as a pipeline: reads are not batched")
			}
			defer func() {
				select {
				case <-hook.release:
				default:
					close(hook.release) // never leave readers blocked
				}
			}()
			// Every read is either in a held batch or queued.
			waitFor(t, 5*time.Second, func() bool { return int(hook.heldCmds.Load())+len(s.reads.reqs) == len(tasks) })
			close(hook.release)
			for range tasks {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
			// Two readers: their two held batches, then the queue in at most
			// one batch each.
			if n := hook.pipelines.Load(); n > 2*batchReaders {
				t.Errorf("%d reads went out in %d pipelines (largest %d commands); want at most %d", len(tasks), n, hook.maxBatch.Load(), 2*batchReaders)
			}
			// A read whose context ended returns at once; the store still works.
			dead, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := s.Get(dead, ownerA, tasks[0].ID); !errors.Is(err, ErrUnavailable) && !errors.Is(err, context.Canceled) {
				t.Errorf("Get with a cancelled context = %v", err)
			}
			if got, err := s.Get(ctx, ownerA, tasks[1].ID); err != nil || got.ID != tasks[1].ID {
				t.Errorf("Get after a cancelled read = %+v, %v", got, err)
			}
		})
	}
}

// holdHook blocks every pipeline until release is closed (so reads queue up
// behind the readers' first batches) and records pipeline counts and sizes.
type holdHook struct {
	release   chan struct{}
	held      chan struct{}
	first     atomic.Bool
	pipelines atomic.Int64
	maxBatch  atomic.Int64
	heldCmds  atomic.Int64 // commands in pipelines waiting for release
}

func (h *holdHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		for n := int64(len(cmds)); ; {
			m := h.maxBatch.Load()
			if n <= m || h.maxBatch.CompareAndSwap(m, n) {
				break
			}
		}
		if h.first.CompareAndSwap(false, true) {
			h.held <- struct{}{}
		}
		select {
		case <-h.release:
		default:
			h.heldCmds.Add(int64(len(cmds)))
			<-h.release
		}
		return next(ctx, cmds)
	}
}
