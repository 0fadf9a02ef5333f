package v20260728

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/proxy/sse"
	"github.com/taskgate/taskgate/proxy/sysconn"
	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/proxy/wire/v20260728/schema"
)

// subscriptions/listen on the 2026 wire. A client opens a stream naming
// the notifications it wants (list changes of tools, prompts, resources;
// resource updates; task status with the tasks extension); the server's
// first message on it acknowledges the subset it will send, and every
// notification on it carries the listen request's id as
// _meta["io.modelcontextprotocol/subscriptionId"].
//
// A 2026 upstream serves it itself. In front of a 2025 upstream taskgate
// serves it (M-33): the owner's upstream session gets one GET stream,
// whose list-change notifications go to each of that owner's listen
// streams that asked for them. Resource updates and task status are not
// acknowledged (nothing is sent for them).

// metaSubscriptionID tags the notifications of a listen stream.
const metaSubscriptionID = "io.modelcontextprotocol/subscriptionId"

// listenNotifications maps the members of a listen request's notifications
// filter that taskgate serves to the notification each one asks for, and
// to the upstream capability whose listChanged offers it.
var listenNotifications = []struct{ member, method, capability string }{
	{"toolsListChanged", "notifications/tools/list_changed", "tools"},
	{"promptsListChanged", "notifications/prompts/list_changed", "prompts"},
	{"resourcesListChanged", "notifications/resources/list_changed", "resources"},
}

// listen serves subscriptions/listen. A filter naming taskIds needs the
// tasks extension declared (M-26).
func (w *Wire) listen(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope, m *reqMeta, era int) {
	if !env.IsRequest() || env.Params == nil {
		fail(rc, info, env.ID, 400, wire.CodeInvalidRequest, "taskgate: subscriptions/listen must be a request with params", nil)
		return
	}
	vals, err := jsonx.Members(env.Params, "notifications")
	var filter [][]byte
	if err == nil && isObject(vals[0]) {
		filter, err = jsonx.Members(vals[0], "toolsListChanged", "promptsListChanged", "resourcesListChanged", "taskIds")
	}
	if err != nil || filter == nil {
		fail(rc, info, env.ID, 200, wire.CodeInvalidParams, "taskgate: subscriptions/listen needs a notifications object", nil)
		return
	}
	if t := filter[3]; t != nil && string(t) != "null" && !m.tasks {
		info.Outcome = "task_required"
		fail(rc, info, env.ID, 400, schema.CodeMissingCapability, "taskgate: subscribing to task status needs the extension "+
			schema.ExtensionTasks+" in the request's client capabilities", []byte(schema.RequiredTasksData))
		return
	}
	if era == era2026 {
		w.Pass(rc, info, env.ID)
		return
	}
	id := append([]byte(nil), env.ID...)
	s, err := w.session(&rc.Request.Header, m.caps())
	if err != nil {
		w.UpstreamFailed(rc, info, id, err)
		return
	}
	l := &listener{id: id, want: map[string]bool{}, ch: make(chan []byte, 64)}
	ack := []byte(`{}`)
	offered := listChangedOffers(s.init)
	for i, n := range listenNotifications {
		if string(filter[i]) == "true" && offered[n.capability] {
			l.want[n.method] = true
			ack, _ = jsonx.SetMember(ack, n.member, []byte("true"))
		}
	}
	if len(l.want) > 0 {
		req := fasthttp.AcquireRequest()
		w.newUpstreamRequest(req, &rc.Request.Header)
		if err := s.hub.start(w, s, req); err != nil {
			w.LogOf(info).Warn().Err(err).Msg("subscriptions/listen: the upstream session's notification stream did not open")
			l.want, ack = map[string]bool{}, []byte(`{}`)
		}
	}
	s.hub.add(l)
	first := appendNotification(nil, "notifications/subscriptions/acknowledged", []byte(`{"notifications":`+string(ack)+`}`), id)

	wire.SSEHeader(rc, true)
	// The writer runs after the handler returned: it uses copies only (id
	// in l, first) and conn, to see the client leave.
	conn := rc.Conn()
	se := w.BeginStream(info)
	w.Eng.Enter()
	rc.SetBodyStreamWriter(func(bw *bufio.Writer) {
		defer w.Eng.Leave()
		defer s.done()
		defer s.hub.remove(l)
		outcome := ""
		defer func() { se.End(outcome) }()
		ctx, cancel := context.WithCancel(w.Root)
		defer cancel()
		defer sysconn.WatchClose(conn, cancel)()
		if _, err := bw.Write(sse.Append(nil, "", first)); err != nil || bw.Flush() != nil {
			outcome = wire.OutcomeClientGone
			return
		}
		every := w.Config.KeepAlive
		if every <= 0 {
			every = 15 * time.Second
		}
		keep := time.NewTicker(every)
		defer keep.Stop()
		for {
			var out []byte
			select {
			case <-ctx.Done():
				outcome = wire.OutcomeClientGone
				if w.Root.Err() != nil {
					outcome = "shutdown"
				}
				return
			case <-keep.C:
				out = []byte(": keep-alive\n\n")
			case msg := <-l.ch:
				out = sse.Append(nil, "", msg)
			}
			if _, err := bw.Write(out); err != nil || bw.Flush() != nil {
				outcome = wire.OutcomeClientGone
				return
			}
		}
	})
}

// listChangedOffers reads which capabilities of an InitializeResult offer
// listChanged.
func listChangedOffers(init []byte) map[string]bool {
	out := map[string]bool{}
	vals, err := jsonx.Members(init, "capabilities")
	if err != nil || !isObject(vals[0]) {
		return out
	}
	caps, err := jsonx.Members(vals[0], "tools", "prompts", "resources")
	if err != nil {
		return out
	}
	for i, name := range []string{"tools", "prompts", "resources"} {
		if !isObject(caps[i]) {
			continue
		}
		if lc, err := jsonx.Members(caps[i], "listChanged"); err == nil && string(lc[0]) == "true" {
			out[name] = true
		}
	}
	return out
}

// appendNotification appends a notification of method whose params are
// params (an object, nil for none) with _meta tagged with the listen
// request's id.
func appendNotification(dst []byte, method string, params, subID []byte) []byte {
	if !isObject(params) {
		params = []byte(`{}`)
	}
	meta := []byte(`{}`)
	if vals, err := jsonx.Members(params, "_meta"); err == nil && isObject(vals[0]) {
		meta = vals[0]
	}
	if m, err := jsonx.SetMember(meta, metaSubscriptionID, subID); err == nil {
		if p, err := jsonx.SetMember(params, "_meta", m); err == nil {
			params = p
		}
	}
	dst = append(dst, `{"jsonrpc":"2.0","method":`...)
	dst = wire.AppendJSONString(dst, method)
	dst = append(dst, `,"params":`...)
	dst = append(dst, params...)
	return append(dst, '}')
}

// listener is one listen stream.
type listener struct {
	id   []byte          // the listen request's id: the subscription id
	want map[string]bool // notification methods asked for and acknowledged
	ch   chan []byte     // tagged notifications to write (dropped when full)
}

// listenHub fans the notifications of one upstream session's GET stream
// out to the listen streams of its owner. It is safe for concurrent use.
type listenHub struct {
	mu      sync.Mutex
	subs    map[*listener]struct{}
	running bool
	ready   chan struct{} // closed once the GET stream answered (or failed)
	err     error
	stop    context.CancelFunc
}

func (hb *listenHub) add(l *listener) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if hb.subs == nil {
		hb.subs = make(map[*listener]struct{})
	}
	hb.subs[l] = struct{}{}
}

func (hb *listenHub) remove(l *listener) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	delete(hb.subs, l)
}

// publish hands a notification to the listeners that asked for it.
func (hb *listenHub) publish(method string, params []byte) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	for l := range hb.subs {
		if !l.want[method] {
			continue
		}
		select {
		case l.ch <- appendNotification(nil, method, params, l.id):
		default: // a listener that does not read loses notifications
		}
	}
}

// hubOpenTimeout bounds the wait for the upstream's GET stream to answer.
const hubOpenTimeout = 10 * time.Second

// start opens the session's GET stream with req (a prepared upstream
// request, released here) unless it runs, and waits until it answered.
func (hb *listenHub) start(w *Wire, s *bridgeSession, req *fasthttp.Request) error {
	hb.mu.Lock()
	if hb.running {
		ready := hb.ready
		hb.mu.Unlock()
		fasthttp.ReleaseRequest(req)
		<-ready
		hb.mu.Lock()
		defer hb.mu.Unlock()
		return hb.err
	}
	ctx, cancel := context.WithCancel(w.Root)
	hb.running, hb.ready, hb.err, hb.stop = true, make(chan struct{}), nil, cancel
	ready := hb.ready
	hb.mu.Unlock()
	req.Header.SetMethod(fasthttp.MethodGet)
	req.Header.Del(fasthttp.HeaderContentType)
	req.Header.Set(fasthttp.HeaderAccept, "text/event-stream")
	s.apply(&req.Header)
	req.SetBody(nil)
	req.Header.SetContentLength(0) // not the client's POST's
	w.bg.Add(1)
	go hb.run(ctx, w, req, ready)
	select {
	case <-ready:
	case <-time.After(hubOpenTimeout):
		cancel()
		<-ready
	}
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.err
}

// run reads the GET stream until it ends, then marks the hub stopped (the
// next listener opens a new one).
func (hb *listenHub) run(ctx context.Context, w *Wire, req *fasthttp.Request, ready chan struct{}) {
	defer w.bg.Done()
	opened := false
	fail := func(err error) {
		hb.mu.Lock()
		hb.running = false
		if !opened {
			hb.err = err
			close(ready)
		}
		hb.mu.Unlock()
	}
	hdr := &fasthttp.RequestHeader{}
	req.Header.CopyTo(hdr)
	hdr.SetMethod(fasthttp.MethodPost)
	hdr.Set(fasthttp.HeaderContentType, "application/json")
	x, err := w.Up.RoundTrip(ctx, req)
	if err != nil && ctx.Err() == nil {
		// A pooled connection the upstream had closed: a GET may be
		// sent again.
		x, err = w.Up.RoundTrip(ctx, req)
	}
	fasthttp.ReleaseRequest(req)
	if err != nil {
		fail(err)
		return
	}
	defer x.Done()
	if st := x.Resp.StatusCode(); st != fasthttp.StatusOK || !wire.IsEventStream(x.Resp.Header.ContentType()) {
		fail(errors.New("the upstream refused the session's GET stream (HTTP " + strconv.Itoa(st) + ")"))
		return
	}
	hb.mu.Lock()
	opened = true
	close(ready)
	hb.mu.Unlock()
	var body io.Reader = x.Resp.BodyStream()
	if body == nil {
		body = bytes.NewReader(x.Resp.Body())
	}
	r := sse.NewReader(body, w.Config.MaxResultSize)
	for {
		ev, err := r.Next()
		if ev != nil && len(ev.Data) > 0 {
			if env, perr := wire.ParseEnvelope(ev.Data); perr == nil && env.HasMethod() {
				switch {
				case !env.IsRequest():
					hb.publish(env.Method, env.Params)
				case env.Method == wire.MethodPing:
					w.postWith(hdr, wire.AppendResult(nil, env.ID, []byte("{}")))
				default:
					w.postWith(hdr, wire.AppendError(nil, env.ID, wire.CodeMethodNotFound, "taskgate: "+env.Method+
						" cannot reach a client of protocol version "+schema.ProtocolVersion+" outside a request"))
				}
			}
		}
		if err != nil {
			fail(err)
			return
		}
	}
}

// close stops the GET stream (the session ends).
func (hb *listenHub) close() {
	hb.mu.Lock()
	stop := hb.stop
	hb.mu.Unlock()
	if stop != nil {
		stop()
	}
}
