package engine

import (
	"container/heap"
	"errors"
	"sync"
	"time"

	"github.com/taskgate/taskgate/taskstore"
)

// supervisor supervises every running call of one engine: it ends a call
// when its task is cancelled (through any replica: the store's wake-ups,
// with lease renewals as the fallback) or its deadline passes, and renews
// the call's lease meanwhile. One goroutine keeps the calls in a heap by
// their next due time (the start of supervision after watchDelay, the next
// renewal, the deadline) and queues the work that is due; the store's
// wake-ups queue work too (WatchFunc). Work that talks to the store or the
// upstream runs on at most supervisionWorkers goroutines that exist only
// while there is work. So a call running for minutes costs no goroutine,
// timer or ticker of its own, and the renewals of many calls due at once
// reach the store together (a Redis store sends concurrent renewals in one
// pipeline).
//
// Its methods are safe for concurrent use (mu guards the heap, the work
// queue and every job's supState). Lock order: a store's wake-up calls
// into the supervisor under the store's lock, so the supervisor never
// calls the store with mu held.
type supervisor struct {
	e    *Engine
	mu   sync.Mutex
	due  supHeap
	work []*Job // jobs with work queued (Job.supWork), in order
	// workers is the number of goroutines running queued work.
	workers int
	kick    chan struct{} // capacity 1: the heap's head moved earlier
}

// watchDelay is how long a call runs before its supervision starts and
// subscribes to the task's events (cancels and client answers).
const watchDelay = 250 * time.Millisecond

// supervisionWorkers bounds the goroutines running supervision work
// (store wake-ups, re-reads, renewals, answers handed upstream) at once.
const supervisionWorkers = 64

// Kinds of supervision work (Job.supWork).
const (
	supStart uint8 = 1 << iota // watch the task's events, hand answers over, re-read
	supWake                    // a wake-up: hand answers over, re-read
	supRenew                   // renew the lease (and hand answers over)
)

// supState is a job's supervision state, guarded by supervisor.mu.
type supState struct {
	at        time.Time // when the job is next due in the heap
	idx       int       // index in the heap; -1 when not in it
	started   bool      // watchDelay passed: the job is supervised
	nextRenew time.Time
	work      uint8         // queued work (supStart, supWake, supRenew)
	busy      bool          // in supervisor.work or being worked on
	over      bool          // nothing more to do: the call ended or its end was decided
	idle      chan struct{} // closed when busy ends (made by stop while busy)
	stopWatch func()        // releases the store watch
}

func newSupervisor(e *Engine) *supervisor {
	return &supervisor{e: e, kick: make(chan struct{}, 1)}
}

// add starts supervising j: its supervision starts after watchDelay, or
// at its deadline when that comes first.
func (s *supervisor) add(j *Job) {
	at := time.Now().Add(min(watchDelay, time.Until(j.deadline)))
	s.mu.Lock()
	j.sup = supState{at: at, idx: -1}
	heap.Push(&s.due, j)
	first := j.sup.idx == 0
	s.mu.Unlock()
	if first {
		s.wakeLoop()
	}
}

func (s *supervisor) wakeLoop() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// stop ends j's supervision: no more work starts for it, work under way
// is waited for (j's context is cancelled first, which cuts it short),
// and the store watch is released.
func (s *supervisor) stop(j *Job) {
	s.mu.Lock()
	j.sup.over = true
	s.unschedule(j)
	var wait chan struct{}
	if j.sup.busy {
		j.sup.idle = make(chan struct{})
		wait = j.sup.idle
	}
	s.mu.Unlock()
	j.cancel(nil)
	if wait != nil {
		<-wait
	}
	s.mu.Lock()
	stopWatch := j.sup.stopWatch
	j.sup.stopWatch = nil
	s.mu.Unlock()
	if stopWatch != nil {
		stopWatch()
	}
}

// unschedule removes j from the heap; s.mu is held.
func (s *supervisor) unschedule(j *Job) {
	if j.sup.idx >= 0 {
		heap.Remove(&s.due, j.sup.idx)
	}
}

// request queues work for j and starts a worker if none is free; s.mu
// is held.
func (s *supervisor) request(j *Job, work uint8) {
	if j.sup.over {
		return
	}
	j.sup.work |= work
	if j.sup.busy {
		return
	}
	j.sup.busy = true
	s.work = append(s.work, j)
	if s.workers < supervisionWorkers {
		s.workers++
		go s.worker()
	}
}

// wake is the store's wake-up of j (under the store's lock).
func (s *supervisor) wake(j *Job) {
	s.mu.Lock()
	s.request(j, supWake)
	s.mu.Unlock()
}

// loop runs the heap until the engine's root context ends.
func (s *supervisor) loop() {
	defer s.e.bg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		now := time.Now()
		for len(s.due) > 0 && !s.due[0].sup.at.After(now) {
			s.fire(s.due[0], now)
		}
		wait := time.Hour
		if len(s.due) > 0 {
			wait = s.due[0].sup.at.Sub(now)
		}
		s.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-s.kick:
		case <-s.e.root.Done():
			return
		}
	}
}

// fire handles j, due at now: it starts j's supervision, ends the call at
// its deadline, or queues a renewal; s.mu is held.
func (s *supervisor) fire(j *Job, now time.Time) {
	st := &j.sup
	if !now.Before(j.deadline) {
		// The deadline (a timeout below watchDelay too).
		st.over = true
		s.unschedule(j)
		j.cancel(j.deadlineCause)
		return
	}
	renew := LeaseRenew(s.e.cfg.Lease)
	if !st.started {
		st.started = true
		st.nextRenew = now.Add(renew)
		s.request(j, supStart)
	} else {
		// A renewal is due. Like a ticker's, renewals keep their period
		// and one that is late is not repeated.
		s.request(j, supRenew)
		st.nextRenew = st.nextRenew.Add(renew)
		if !st.nextRenew.After(now) {
			st.nextRenew = now.Add(renew)
		}
	}
	st.at = st.nextRenew
	if j.deadline.Before(st.at) {
		st.at = j.deadline
	}
	heap.Fix(&s.due, st.idx)
}

// worker runs queued work until there is none.
func (s *supervisor) worker() {
	s.mu.Lock()
	for len(s.work) > 0 {
		j := s.work[0]
		s.work[0] = nil
		s.work = s.work[1:]
		work := j.sup.work
		j.sup.work = 0
		if !j.sup.over && work != 0 {
			s.mu.Unlock()
			over := s.run(j, work)
			s.mu.Lock()
			if over {
				j.sup.over = true
				s.unschedule(j)
			}
		}
		if j.sup.work != 0 && !j.sup.over {
			s.work = append(s.work, j)
			continue
		}
		j.sup.busy = false
		if j.sup.idle != nil {
			close(j.sup.idle)
			j.sup.idle = nil
		}
	}
	if len(s.work) == 0 {
		s.work = nil // let a burst's backing array go
	}
	s.workers--
	s.mu.Unlock()
}

// run does j's queued work; it reports whether the call's end was decided
// (the task was cancelled or is gone: j's context is cancelled).
func (s *supervisor) run(j *Job, work uint8) bool {
	e, t, ctx := s.e, j.Task, j.ctx
	if ctx.Err() != nil {
		return true
	}
	check := func(st taskstore.Status, err error) bool {
		switch {
		case errors.Is(err, taskstore.ErrNotFound):
			j.cancel(ErrExpired)
			return true
		case err == nil && st == taskstore.Cancelled:
			j.cancel(ErrCancelledByClient)
			return true
		}
		return false
	}
	reread := func() bool {
		tt, err := e.store.Get(ctx, t.Owner, t.ID)
		var st taskstore.Status
		if tt != nil {
			st = tt.Status
		}
		return check(st, err)
	}
	if work&supStart != 0 {
		// Subscribe, then re-read: a cancel that came before is caught.
		// Without a watch, lease renewals are the fallback.
		stopWatch, err := e.store.WatchFunc(ctx, t.Owner, t.ID, taskstore.EventTerminal+taskstore.EventAnswer,
			func() { s.wake(j) })
		if err == nil {
			s.mu.Lock()
			over := j.sup.over
			if !over {
				j.sup.stopWatch = stopWatch
			}
			s.mu.Unlock()
			if over {
				stopWatch()
				return true
			}
			work |= supWake
		}
	}
	if work&(supWake|supRenew) != 0 {
		e.up.Answers(ctx, j) // on a renewal: in case a wake-up was missed
	}
	if work&supWake != 0 && reread() {
		return true
	}
	if work&supRenew != 0 {
		st, err := e.store.Renew(ctx, t.Owner, t.ID, LeaseTTL(e.cfg.Lease))
		if check(st, err) {
			return true
		}
	}
	return false
}

// supHeap orders jobs by their next due time (container/heap).
type supHeap []*Job

func (h supHeap) Len() int           { return len(h) }
func (h supHeap) Less(a, b int) bool { return h[a].sup.at.Before(h[b].sup.at) }
func (h supHeap) Swap(a, b int) {
	h[a], h[b] = h[b], h[a]
	h[a].sup.idx, h[b].sup.idx = a, b
}

func (h *supHeap) Push(x any) {
	j := x.(*Job)
	j.sup.idx = len(*h)
	*h = append(*h, j)
}

func (h *supHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	old[len(old)-1] = nil
	j.sup.idx = -1
	*h = old[:len(old)-1]
	return j
}
