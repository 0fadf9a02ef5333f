package proxy

import (
	"github.com/taskgate/taskgate/proxy/wire"
	v20251125 "github.com/taskgate/taskgate/proxy/wire/v20251125"
	"github.com/taskgate/taskgate/proxy/wire/v20260728"
)

// newEras returns the wire eras this front serves, in the order they are
// asked to serve a request: an era that recognises its own requests by
// what they carry comes before the era that serves everything else. A new
// revision is one package (see package wire) and one line here.
func newEras(f *wire.Front) []wire.Era {
	return []wire.Era{
		v20260728.New(f), // MCP 2026-07-28
		v20251125.New(f), // MCP 2025-11-25 and older clients
	}
}

// newFront returns what the eras share with this Handler (package wire):
// its settings, its parts and hooks into its own work. The engine's fields
// (Eng, Root) are set once the engine exists.
func (h *Handler) newFront() *wire.Front {
	f := &wire.Front{
		Config: wire.Config{
			MaxResultSize:     h.cfg.MaxResultSize,
			KeepAlive:         h.cfg.KeepAlive,
			TaskRate:          h.cfg.TaskRate,
			MaxTasksPerOwner:  h.cfg.MaxTasksPerOwner,
			ProcessID:         h.cfg.ProcessID,
			StoreTimeout:      h.cfg.StoreTimeout,
			StreamMaxLifetime: h.cfg.StreamMaxLifetime,
			PromoteWindow:     h.cfg.PromoteWindow,
		},
		Store:           h.store,
		Up:              h.up,
		Log:             &h.log,
		Tracer:          h.tr,
		Waiters:         h.m.waiters,
		Policy:          h.policy,
		Owner:           h.id.owner,
		Credential:      h.id.credential,
		BindSession:     h.id.bindSession,
		DeleteSession:   h.deleteSession,
		KeyedHash:       h.id.keyedHash,
		HashShort:       h.id.hashShort,
		RememberVersion: h.bridge.remember,
		Pass:            h.pass,
		Forward:         h.forwardRewriting,
		PrepareUpstream: h.prepareUpstream,
		RelayResponse:   h.relayResponse,
		UpstreamFailed:  h.upstreamFailed,
		ObserveUpstream: h.m.observeUpstream,
		BeginStream:     func(info *wire.Info) wire.StreamEnd { return h.beginStream(info) },
	}
	return f
}
