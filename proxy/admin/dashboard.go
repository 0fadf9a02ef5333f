package admin

import (
	_ "embed"
	"net/http"
)

// dashboardHTML is the whole dashboard: one page with its script and
// styles inline, so it works without any other server (air-gapped
// clusters). It holds no secret: the page asks for the admin token and
// sends it as a bearer token on each API call.
//
//go:embed dashboard.html
var dashboardHTML []byte

// dashboardCSP lets the page run its own inline script and styles and
// talk to this server only.
const dashboardCSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func (s *Server) dashboard(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" "+r.URL.Path+": use GET")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", dashboardCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(dashboardHTML)
}
