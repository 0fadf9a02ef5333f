package taskstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// ErrOwnerKeyNotLoaded is what a KeyGate's gated operations (and its
// Ping) answer until the gate is opened: the owner key the replicas share
// through Redis is not known yet. It wraps ErrUnavailable.
var ErrOwnerKeyNotLoaded = fmt.Errorf("%w: the owner key shared through Redis is not loaded yet", ErrUnavailable)

// ErrOwnerKeyMismatch is what a KeyGate's Ping answers while its mismatch
// flag is set: this replica found a different owner key in Redis than its
// own, and has not yet seen them agree. It wraps ErrUnavailable.
var ErrOwnerKeyMismatch = fmt.Errorf("%w: the owner key in Redis differed from this replica's (Redis lost its data); converging", ErrUnavailable)

// KeyGate is a Store that holds back, until Open, the operations through
// which tasks and session records are created or found by their owner or
// session key: Tasks' Create, Get, Outcome, List and Cancel, both
// SessionVersions methods, and SessionRecords' BindSession, Session,
// StartSessionTask and CloseSession. Those keys are keyed hashes of the
// client's credential and session id; a key hashed with a provisional
// owner key (before the one the replicas share is loaded) would put tasks
// and sessions where the other replicas never look. Every other method
// acts on a task found through the gated ones (by the runner that created
// it, or an operator across owners) and passes through unchanged.
//
// Until Open, the gated methods return ErrOwnerKeyNotLoaded without
// reaching the store. Ping reports the store's own health first, then
// ErrOwnerKeyMismatch while SetMismatch(true) is in force, then
// ErrOwnerKeyNotLoaded until Open. A KeyGate is safe for concurrent use;
// the zero value wraps no store.
type KeyGate struct {
	Store
	ready    atomic.Bool
	mismatch atomic.Bool
}

var _ Store = (*KeyGate)(nil)

// NewKeyGate returns a closed gate in front of s.
func NewKeyGate(s Store) *KeyGate { return &KeyGate{Store: s} }

// Open lets the gated operations through from now on; it cannot be undone.
func (g *KeyGate) Open() { g.ready.Store(true) }

// IsOpen reports whether Open was called.
func (g *KeyGate) IsOpen() bool { return g.ready.Load() }

// SetMismatch sets or clears the flag that fails Ping with
// ErrOwnerKeyMismatch (the other operations are unaffected) and returns
// its previous value.
func (g *KeyGate) SetMismatch(on bool) (was bool) { return g.mismatch.Swap(on) }

func (g *KeyGate) check() error {
	if g.ready.Load() {
		return nil
	}
	return ErrOwnerKeyNotLoaded
}

// Create is Store.Create once the gate is open.
func (g *KeyGate) Create(ctx context.Context, t *Task, opt CreateOptions) error {
	if err := g.check(); err != nil {
		return err
	}
	return g.Store.Create(ctx, t, opt)
}

// Get is Store.Get once the gate is open.
func (g *KeyGate) Get(ctx context.Context, owner, id string) (*Task, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	return g.Store.Get(ctx, owner, id)
}

// Outcome is Store.Outcome once the gate is open.
func (g *KeyGate) Outcome(ctx context.Context, owner, id string) (*Task, *Outcome, error) {
	if err := g.check(); err != nil {
		return nil, nil, err
	}
	return g.Store.Outcome(ctx, owner, id)
}

// List is Store.List once the gate is open.
func (g *KeyGate) List(ctx context.Context, owner, cursor string, limit int) ([]Task, string, error) {
	if err := g.check(); err != nil {
		return nil, "", err
	}
	return g.Store.List(ctx, owner, cursor, limit)
}

// Cancel is Store.Cancel once the gate is open.
func (g *KeyGate) Cancel(ctx context.Context, owner, id, msg string) (*Task, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	return g.Store.Cancel(ctx, owner, id, msg)
}

// SessionVersion is Store.SessionVersion once the gate is open.
func (g *KeyGate) SessionVersion(ctx context.Context, session string) (string, error) {
	if err := g.check(); err != nil {
		return "", err
	}
	return g.Store.SessionVersion(ctx, session)
}

// SetSessionVersion is Store.SetSessionVersion once the gate is open.
func (g *KeyGate) SetSessionVersion(ctx context.Context, session, version string, ttl time.Duration) error {
	if err := g.check(); err != nil {
		return err
	}
	return g.Store.SetSessionVersion(ctx, session, version, ttl)
}

// BindSession is Store.BindSession once the gate is open.
func (g *KeyGate) BindSession(ctx context.Context, session, credential string, ttl time.Duration) error {
	if err := g.check(); err != nil {
		return err
	}
	return g.Store.BindSession(ctx, session, credential, ttl)
}

// Session is Store.Session once the gate is open.
func (g *KeyGate) Session(ctx context.Context, session string) (SessionRecord, error) {
	if err := g.check(); err != nil {
		return SessionRecord{}, err
	}
	return g.Store.Session(ctx, session)
}

// StartSessionTask is Store.StartSessionTask once the gate is open.
func (g *KeyGate) StartSessionTask(ctx context.Context, session, id string, until time.Time) error {
	if err := g.check(); err != nil {
		return err
	}
	return g.Store.StartSessionTask(ctx, session, id, until)
}

// CloseSession is Store.CloseSession once the gate is open.
func (g *KeyGate) CloseSession(ctx context.Context, session string) (bool, error) {
	if err := g.check(); err != nil {
		return false, err
	}
	return g.Store.CloseSession(ctx, session)
}

// Ping is the store's Ping, then the gate's state: ErrOwnerKeyMismatch
// while the mismatch flag is set, ErrOwnerKeyNotLoaded before Open.
func (g *KeyGate) Ping(ctx context.Context) error {
	if err := g.Store.Ping(ctx); err != nil {
		return err
	}
	if g.mismatch.Load() {
		return ErrOwnerKeyMismatch
	}
	return g.check()
}
