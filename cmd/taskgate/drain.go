package main

import (
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// drainState is set when taskgate starts shutting down: /readyz answers
// 503 from then on, so load balancers stop sending new connections, while
// the proxy keeps serving (each answer then closes its connection, so
// keep-alive clients reconnect to another replica). It is safe for
// concurrent use.
type drainState struct{ on atomic.Bool }

// readyz wraps the admin server's handler: while draining, /readyz
// answers 503.
func (d *drainState) readyz(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" && d.on.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "draining: taskgate is shutting down\n")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// proxy wraps the proxy's handler: while draining, each answer closes its
// connection. The flag is set after the handler returns (fasthttp writes
// the response after that, and a proxied answer replaces the response's
// headers inside the handler).
func (d *drainState) proxy(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(rc *fasthttp.RequestCtx) {
		h(rc)
		if d.on.Load() {
			rc.SetConnectionClose()
		}
	}
}

// drain marks taskgate draining and keeps serving for --drain-delay, or
// until another signal on sig cuts the delay short.
func (g *gateway) drain(sig <-chan os.Signal) {
	g.draining.on.Store(true)
	d := g.o.drainDelay
	if d <= 0 {
		return
	}
	g.log.Info().Stringer("drain_delay", d).Msg("draining: /readyz answers 503; new connections are still served until the delay ends")
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case s := <-sig:
		g.log.Info().Str("signal", s.String()).Msg("draining cut short by a second signal")
	}
}
