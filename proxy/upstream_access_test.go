package proxy

import "github.com/taskgate/taskgate/proxy/upstream"

// upClient returns the Handler's upstream client, for tests that look at
// its pools or change its timing.
func (h *Handler) upClient() *upstream.Client { return h.up.(*upstream.Client) }

// idleConns returns how many idle connections the upstream client's
// pass-through and background pools hold.
func (h *Handler) idleConns() (pass, background int) { return h.upClient().IdleConns() }
