package main

// Load workers: the request kinds, one iteration of each mode, the mixed
// mode's choices, and the accounting of each request against the window.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"
)

// Request kinds, each with its own histogram.
type op int

const (
	opIter op = iota // one iteration of the mode (the summary line)
	opCall
	opCreate
	opGet
	opResult
	opCancel
	opList
	opStream
	numOps
)

var opNames = [numOps]string{"iter", "call", "create", "get", "result", "cancel", "list", "stream"}

func opByName(s string) (op, bool) {
	for i, n := range opNames {
		if n == s && i != int(opIter) {
			return op(i), true
		}
	}
	return 0, false
}

var modes = []string{"call", "create", "get", "create-result", "mixed"}

// window is the measured interval of a mode.
type window struct {
	start, end time.Time
}

func (w window) startedIn(t time.Time) bool { return !t.Before(w.start) && t.Before(w.end) }

// taskRef is a task a worker created, for mixed mode.
type taskRef struct {
	id     string
	at     time.Time
	target int
}

// worker is one load worker.
type worker struct {
	n        int
	cfg      *config
	c        *client
	sessions []*session // per target
	win      *window
	rng      *rand.Rand
	rr       int

	hists    [numOps]hist   // requests started in the window
	done     [numOps]uint64 // of those, ended in the window too
	errs     map[string]uint64
	errCount uint64
	lastErr  string
	progress *atomic.Uint64 // completed iterations, for --report
	notes    uint64         // messages seen on stream answers before their result
	inline   uint64         // 2026 task calls answered with their result, not a task

	own    []string  // get mode: this worker's tasks
	recent []taskRef // mixed mode: recently created tasks (ring)
	next   int
}

// timed runs f and records its latency (or error) under o when it started
// inside the window; it counts towards throughput when it also ended there.
func (w *worker) timed(o op, f func() error) error {
	t0 := time.Now()
	err := f()
	w.account(o, t0, time.Now(), err)
	return err
}

func (w *worker) account(o op, t0, t1 time.Time, err error) {
	if !w.win.startedIn(t0) {
		return
	}
	if err != nil {
		kind := "other"
		var le *loadErr
		if errors.As(err, &le) {
			kind = le.kind
		}
		w.errs[opNames[o]+":"+kind]++
		w.errCount++
		w.lastErr = opNames[o] + ": " + err.Error()
		return
	}
	w.hists[o].record(t1.Sub(t0))
	if !t1.After(w.win.end) {
		w.done[o]++
		if o == opIter {
			w.progress.Add(1)
		}
	}
}

func (w *worker) session(i int) *session { return w.sessions[i%len(w.sessions)] }

// setup runs before the window: the get mode's tasks.
func (w *worker) setup(mode string) error {
	if mode != "get" {
		return nil
	}
	// On the 2026 wire a call may be answered before it became a task;
	// such calls are retried, a bounded number of times.
	for tries := 0; len(w.own) < w.cfg.tasks; tries++ {
		if tries == 20*w.cfg.tasks {
			return fmt.Errorf("creating the tasks to poll: --tool %s answered before it became a task %d times "+
				"(run taskgate with a shorter --promote-window, or call a slower tool)", w.cfg.tool, tries-len(w.own))
		}
		id, err := w.create(w.session(0), w.cfg.tool, w.cfg.args)
		if err != nil {
			return fmt.Errorf("creating the tasks to poll: %w", err)
		}
		if id == "" {
			continue
		}
		w.own = append(w.own, id)
	}
	return nil
}

// iterate runs one iteration of mode.
func (w *worker) iterate(mode string) error {
	t0 := time.Now()
	var err error
	switch mode {
	case "call":
		err = w.timed(opCall, func() error { return w.c.call(w.session(0)) })
	case "create":
		err = w.timed(opCreate, func() error {
			_, err := w.create(w.session(0), w.cfg.tool, w.cfg.args)
			return err
		})
	case "get":
		taskID := w.own[w.next%len(w.own)]
		w.next++
		err = w.timed(opGet, func() error {
			st, err := w.c.get(w.session(0), taskID)
			if err == nil && st != "completed" && st != "working" {
				err = errf("bad-status", "polled task is %q", st)
			}
			return err
		})
	case "create-result":
		if w.c.wire2026 {
			err = w.createPoll26()
			break
		}
		var taskID string
		err = w.timed(opCreate, func() error {
			var err error
			taskID, err = w.c.create(w.session(0), w.cfg.tool, w.cfg.args, "")
			return err
		})
		if err == nil {
			err = w.timed(opResult, func() error {
				_, err := w.c.result(w.session(0), taskID, w.cfg.resultAccept)
				return err
			})
		}
	case "mixed":
		err = w.mixed()
	}
	if err == nil {
		w.account(opIter, t0, time.Now(), nil)
	}
	return err
}

func (w *worker) pick() op {
	r := w.rng.IntN(w.cfg.mixTotal)
	for o := opCall; o < numOps; o++ {
		if r < w.cfg.mix[o] {
			return o
		}
		r -= w.cfg.mix[o]
	}
	return opCall
}

// recentTask returns a task created in the last ttl/2, or false.
func (w *worker) recentTask() (taskRef, bool) {
	if len(w.recent) == 0 {
		return taskRef{}, false
	}
	for range 4 {
		r := w.recent[w.rng.IntN(len(w.recent))]
		if time.Since(r.at) < time.Duration(w.cfg.ttl)*time.Millisecond/2 {
			return r, true
		}
	}
	return taskRef{}, false
}

func (w *worker) remember(id string, target int) {
	r := taskRef{id: id, at: time.Now(), target: target}
	if len(w.recent) < 128 {
		w.recent = append(w.recent, r)
		return
	}
	w.recent[w.next%len(w.recent)] = r
	w.next++
}

func (w *worker) mixed() error {
	o := w.pick()
	t := w.rr
	w.rr++
	other := (t + 1) % len(w.sessions)
	if o == opGet || o == opResult {
		r, ok := w.recentTask()
		if !ok {
			o = opCreate
		} else {
			t, other = r.target, (r.target+1)%len(w.sessions)
			if o == opGet {
				return w.timed(opGet, func() error {
					_, err := w.c.get(w.session(other), r.id)
					return err
				})
			}
			return w.timed(opResult, func() error {
				_, err := w.c.result(w.session(other), r.id, w.cfg.resultAccept)
				return err
			})
		}
	}
	switch o {
	case opCall:
		return w.timed(opCall, func() error { return w.c.call(w.session(t)) })
	case opCreate:
		return w.timed(opCreate, func() error {
			id, err := w.c.create(w.session(t), w.cfg.tool, w.cfg.args, "")
			if err == nil {
				w.remember(id, t%len(w.sessions))
			}
			return err
		})
	case opList:
		return w.timed(opList, func() error { return w.c.list(w.session(t)) })
	case opCancel:
		var id string
		if err := w.timed(opCreate, func() error {
			var err error
			id, err = w.c.create(w.session(t), w.cfg.slowTool, w.cfg.cancelArgs, "")
			return err
		}); err != nil {
			return err
		}
		return w.timed(opCancel, func() error { return w.c.cancel(w.session(other), id) })
	case opStream:
		var id string
		if err := w.timed(opCreate, func() error {
			var err error
			id, err = w.c.create(w.session(t), w.cfg.slowTool, w.cfg.streamArgs, "p-"+strconv.FormatInt(w.c.id, 10))
			return err
		}); err != nil {
			return err
		}
		return w.timed(opStream, func() error {
			a, err := w.c.result(w.session(other), id, acceptBoth)
			w.notes += uint64(a.notes)
			return err
		})
	}
	return nil
}

func (w *worker) run(mode string, begin <-chan struct{}, stop <-chan struct{}) {
	<-begin
	for {
		select {
		case <-stop:
			return
		default:
		}
		if !time.Now().Before(w.win.end) {
			return
		}
		if err := w.iterate(mode); err != nil {
			var le *loadErr
			if errors.As(err, &le) && (le.kind == "transport" || le.kind == "timeout") {
				time.Sleep(5 * time.Millisecond) // do not spin on a dead target
			}
		}
	}
}
