package proxy

import (
	"sync"
	"testing"
)

// TestLifeGroupAddDuringWait: Adds that race with Wait (as requests still
// in their handlers do while Close waits) are allowed, and Wait returns
// only once every counted goroutine is done. Under -race a sync.WaitGroup
// in its place reports the Add from zero concurrent with Wait.
func TestLifeGroupAddDuringWait(t *testing.T) {
	for range 50 {
		var g lifeGroup
		var done sync.WaitGroup // the test's own bookkeeping, never raced
		var mu sync.Mutex
		finished := 0
		waited := make(chan int)
		go func() { g.Wait(); mu.Lock(); n := finished; mu.Unlock(); waited <- n }()
		const workers = 8
		done.Add(workers)
		g.Add(1) // one counted goroutine from the start, so Wait cannot return at once
		for range workers {
			go func() {
				defer done.Done()
				g.Add(1)
				mu.Lock()
				finished++
				mu.Unlock()
				g.Done()
			}()
		}
		done.Wait()
		g.Done()
		if n := <-waited; n != workers {
			t.Fatalf("Wait returned after %d of %d counted goroutines", n, workers)
		}
	}
}

func TestLifeGroupNegativePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Done below zero did not panic")
		}
	}()
	var g lifeGroup
	g.Done()
}
