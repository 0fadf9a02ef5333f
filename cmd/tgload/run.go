package main

// One mode's run: sessions and setup, warm-up and window, CPU readings and
// progress reports, and the merged result.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func runMode(cfg *config, mode string, stop <-chan struct{}) (*result, error) {
	targets := make([]*target, len(cfg.urls))
	for i, u := range cfg.urls {
		targets[i] = newTarget(u, cfg.conc+16, cfg.timeout)
	}
	if mode == "get" {
		// The polled tasks must outlive warm-up and measurement.
		need := (cfg.warmup + cfg.duration + time.Minute).Milliseconds()
		if cfg.ttl < need {
			c2 := *cfg
			c2.ttl = need
			cfg = &c2
		}
	}
	win := &window{}
	var progress atomic.Uint64
	workers := make([]*worker, cfg.conc)
	var shared []*session
	if cfg.sharedSession {
		c := newClient(cfg, 0)
		for _, t := range targets {
			s, err := c.initialize(t)
			if err != nil {
				return nil, err
			}
			shared = append(shared, s)
		}
	}
	var wg sync.WaitGroup
	setupErrs := make([]error, cfg.conc)
	for i := range workers {
		w := &worker{n: i, cfg: cfg, c: newClient(cfg, i), win: win, errs: map[string]uint64{},
			rng: rand.New(rand.NewPCG(uint64(i)+1, uint64(time.Now().UnixNano()))), progress: &progress,
			rr: i}
		workers[i] = w
		wg.Go(func() {
			if shared != nil {
				w.sessions = shared
			} else {
				for _, t := range targets {
					s, err := w.c.initialize(t)
					if err != nil {
						setupErrs[i] = err
						return
					}
					w.sessions = append(w.sessions, s)
				}
			}
			// Spread the workers' first target over the targets.
			if len(w.sessions) > 1 && shared == nil {
				k := i % len(w.sessions)
				w.sessions = append(w.sessions[k:], w.sessions[:k]...)
			}
			setupErrs[i] = w.setup(mode)
		})
	}
	wg.Wait()
	if err := errors.Join(setupErrs...); err != nil {
		return nil, err
	}

	now := time.Now()
	win.start = now.Add(cfg.warmup)
	win.end = win.start.Add(cfg.duration)
	begin := make(chan struct{})
	for _, w := range workers {
		wg.Go(func() { w.run(mode, begin, stop) })
	}
	close(begin)

	// CPU accounting over the window, and progress reports.
	cpuStart := map[string]float64{}
	var cpuEnd map[string]float64
	var selfStart float64
	var redisStart, redisEnd map[string]redisCounts
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-time.After(time.Until(win.start)):
		case <-stop:
			return
		}
		cpuStart = readCPU(cfg.cpu)
		selfStart = selfCPU()
		redisStart = readRedis(cfg.redis)
		var tick <-chan time.Time
		if cfg.report > 0 {
			tk := time.NewTicker(cfg.report)
			defer tk.Stop()
			tick = tk.C
		}
		last, lastAt := uint64(0), win.start
		endT := time.NewTimer(time.Until(win.end))
		defer endT.Stop()
		for {
			select {
			case <-endT.C:
				cpuEnd = readCPU(cfg.cpu)
				cpuEnd["tgload"] = selfCPU()
				redisEnd = readRedis(cfg.redis)
				return
			case <-stop:
				return
			case t := <-tick:
				n := progress.Load()
				fmt.Fprintf(os.Stderr, "tgload: %s %s: %d iterations, %.1f/s in the last %s\n",
					mode, t.Sub(win.start).Round(time.Second), n, float64(n-last)/t.Sub(lastAt).Seconds(), t.Sub(lastAt).Round(time.Second))
				last, lastAt = n, t
			}
		}
	}()
	wg.Wait()
	<-done

	// Close sessions (DELETE), best effort.
	if shared != nil {
		c := newClient(cfg, 0)
		for _, s := range shared {
			c.closeSession(s)
		}
	} else {
		for _, w := range workers {
			wg.Go(func() {
				for _, s := range w.sessions {
					w.c.closeSession(s)
				}
			})
		}
		wg.Wait()
	}

	elapsed := cfg.duration
	if t := time.Now(); t.Before(win.end) { // interrupted
		elapsed = max(t.Sub(win.start), time.Millisecond)
	}
	res := &result{Mode: mode, Era: eraLabel(cfg.era), Label: cfg.label, Targets: cfg.urls, Concurrency: cfg.conc,
		DurationS: elapsed.Seconds(), ErrorKinds: map[string]uint64{}}
	var all [numOps]hist
	var fin [numOps]uint64
	for _, w := range workers {
		for o := range numOps {
			all[o].merge(&w.hists[o])
			fin[o] += w.done[o]
		}
		for k, v := range w.errs {
			res.ErrorKinds[k] += v
		}
		res.Errors += w.errCount
		if w.lastErr != "" {
			res.LastError = w.lastErr
		}
		res.StreamNotes += w.notes
		res.Inline += w.inline
	}
	it := &all[opIter]
	res.Requests = it.n
	res.RPS = float64(fin[opIter]) / elapsed.Seconds()
	res.P50ms, res.P90ms, res.P99ms = ms(it.quantile(.5)), ms(it.quantile(.9)), ms(it.quantile(.99))
	res.MaxMs, res.MeanMs = ms(time.Duration(it.max)), ms(it.mean())
	if mode == "create-result" || mode == "mixed" {
		res.Ops = map[string]opStats{}
		for o := opCall; o < numOps; o++ {
			h := &all[o]
			if h.n == 0 {
				continue
			}
			res.Ops[opNames[o]] = opStats{N: h.n, RPS: float64(fin[o]) / elapsed.Seconds(),
				P50ms: ms(h.quantile(.5)), P90ms: ms(h.quantile(.9)), P99ms: ms(h.quantile(.99)), MaxMs: ms(time.Duration(h.max))}
		}
	}
	if cpuEnd != nil {
		res.CPU = map[string]float64{}
		secs := cfg.duration.Seconds()
		for k, v := range cpuEnd {
			if k == "tgload" {
				res.CPU[k] = round2((v - selfStart) / secs)
			} else if s, ok := cpuStart[k]; ok {
				res.CPU[k] = round2((v - s) / secs)
			}
		}
	}
	if done := res.RPS * elapsed.Seconds(); done > 0 && len(redisEnd) > 0 {
		res.Redis = map[string]redisCounts{}
		for k, e := range redisEnd {
			if b, ok := redisStart[k]; ok {
				res.Redis[k] = redisCounts{Calls: round2((e.Calls - b.Calls) / done),
					Usec: round2((e.Usec - b.Usec) / done), EvalUsec: round2((e.EvalUsec - b.EvalUsec) / done)}
			}
		}
	}
	if len(res.ErrorKinds) == 0 {
		res.ErrorKinds = nil
	}
	return res, nil
}
