package engine

import (
	"runtime"
	"sync"
	"testing"
)

// TestLifeGroupWaitsForAll: while one counted goroutine runs (Close waits
// for a runner), others are added and finish concurrently; Wait returns
// only after the last of them is done.
func TestLifeGroupWaitsForAll(t *testing.T) {
	for range 50 {
		var g lifeGroup
		var mu sync.Mutex
		finished := 0
		g.Add(1) // the runner Close waits for
		waited := make(chan int)
		go func() { g.Wait(); mu.Lock(); n := finished; mu.Unlock(); waited <- n }()
		const workers = 8
		var started sync.WaitGroup // the test's own bookkeeping
		started.Add(workers)
		for range workers {
			g.Add(1) // added before the runner ends, so Wait cannot have returned
			go func() {
				defer started.Done()
				mu.Lock()
				finished++
				mu.Unlock()
				g.Done()
			}()
		}
		started.Wait()
		g.Done()
		if n := <-waited; n != workers {
			t.Fatalf("Wait returned after %d of %d counted goroutines", n, workers)
		}
	}
}

// TestLifeGroupAddFromZeroDuringWait: Close waits for the last runner;
// it ends (the count reaches zero) and, in the same instant, a request
// still in its handler starts a stream (an Add from zero) with nothing
// ordering it after Close's Wait. That is allowed; Wait returns. (This is
// the shutdown race CI's race detector reported while the count was a
// sync.WaitGroup.)
func TestLifeGroupAddFromZeroDuringWait(t *testing.T) {
	for range 200 {
		var g lifeGroup
		g.Add(1) // the last runner
		waited := make(chan struct{})
		go func() { g.Wait(); close(waited) }()
		handler := make(chan struct{})
		go func() {
			defer close(handler)
			for range 3 {
				runtime.Gosched() // let Wait block first
			}
			g.Done() // the runner ends
			g.Add(1) // the handler's stream starts
			g.Done() // and ends
		}()
		<-handler
		<-waited
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
