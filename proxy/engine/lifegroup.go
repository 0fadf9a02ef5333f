package engine

import "sync"

// lifeGroup counts the Engine's runners and the wires' result streams, like a
// sync.WaitGroup, but allows Add while Wait is under way. Close waits for
// the count to reach zero while the HTTP server drains at the same time,
// so a request that is still in its handler may start a runner or a stream
// after Wait began; a WaitGroup forbids exactly that (an Add from zero
// concurrent with Wait). Wait returns the first time the count is zero.
// The zero value is ready to use; it is safe for concurrent use.
type lifeGroup struct {
	mu   sync.Mutex
	n    int
	zero *sync.Cond
}

// Add adds delta to the count; the count must not go below zero.
func (g *lifeGroup) Add(delta int) {
	g.mu.Lock()
	g.n += delta
	if g.n < 0 {
		g.mu.Unlock()
		panic("engine: negative lifeGroup count")
	}
	if g.n == 0 && g.zero != nil {
		g.zero.Broadcast()
	}
	g.mu.Unlock()
}

// Done subtracts one from the count.
func (g *lifeGroup) Done() { g.Add(-1) }

// Wait blocks until the count is zero.
func (g *lifeGroup) Wait() {
	g.mu.Lock()
	if g.zero == nil {
		g.zero = sync.NewCond(&g.mu)
	}
	for g.n > 0 {
		g.zero.Wait()
	}
	g.mu.Unlock()
}
