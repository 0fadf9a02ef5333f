package taskstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// readBatcher sends the commands of concurrent operations to Redis
// together: the HMGETs of Get and Outcome and the EVALSHAs of the
// one-script operations (Create, Update, Finish, Cancel, Renew, the stream
// operations). A reader goroutine takes the first waiting command and
// every other one already queued (up to batchMax) and runs them as one
// pipeline, so a burst of task operations costs one write and one read on
// the connection, in taskgate and in Redis, instead of one each. A batch
// never waits for more commands to come; at low load a command costs two
// goroutine hand-offs more. Measured with 64 clients polling tasks/get:
// Redis CPU 0.29 -> 0.17 cores at a higher rate. Order: one caller's
// operations are sequential (each waits for its reply), so batching never
// reorders them; concurrent callers had no order to keep.
//
// Large payloads stay out of the batches: a command whose arguments carry
// largePayload bytes or more (a large outcome, message or answer) runs
// alone on a connection of its own from the client's pool (direct), at most
// largeLanes at once, so it never holds up the small commands pipelined
// behind it; large replies are kept out the same way by the callers
// (redis_spill.go reads a large outcome with direct). A batch's slots are cleared
// once it ran, so no request or reply outlives its caller.
type readBatcher struct {
	rdb   redis.UniversalClient
	wait  replicaWait   // WAIT after writes; zero: none
	lanes chan struct{} // a token per direct command running
	reqs  chan *readReq
	stop  chan struct{}
	start sync.Once // the readers start at the first read
	once  sync.Once
	wg    sync.WaitGroup
}

// batchReaders is how many batches may be in flight at once; batchMax caps
// a batch.
const (
	batchReaders = 2
	batchMax     = 64
)

// largePayload is the argument size from which a command runs alone
// (direct) rather than in a batch; largeLanes bounds how many such commands
// run at once, so they take at most that many of the client's pooled
// connections (go-redis's default pool has 10 per CPU) and the small ones
// keep theirs.
const (
	largePayload = 64 << 10
	largeLanes   = 4
)

type readReq struct {
	ctx  context.Context
	cmd  redis.Cmder
	done chan struct{}
}

func newReadBatcher(rdb redis.UniversalClient) *readBatcher {
	return &readBatcher{rdb: rdb, lanes: make(chan struct{}, largeLanes), reqs: make(chan *readReq, batchMax), stop: make(chan struct{})}
}

// do runs cmd in a batch, or alone (direct) when its arguments are large;
// it returns when cmd has its result or ctx ends (then with ctx's error;
// the batch may still run the command).
func (b *readBatcher) do(ctx context.Context, cmd redis.Cmder) error {
	if argsSize(cmd.Args()) >= largePayload {
		return b.direct(ctx, cmd)
	}
	b.start.Do(func() {
		select {
		case <-b.stop:
			return // closed before the first read
		default:
		}
		b.wg.Add(batchReaders)
		for range batchReaders {
			go b.loop()
		}
	})
	select {
	case <-b.stop:
		return errClosed
	default:
	}
	r := &readReq{ctx: ctx, cmd: cmd, done: make(chan struct{})}
	select {
	case b.reqs <- r:
	case <-b.stop:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-r.done:
		return cmd.Err()
	case <-b.stop:
		return errClosed // readers leave queued reads behind when closing
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *readBatcher) loop() {
	defer b.wg.Done()
	batch := make([]*readReq, 0, batchMax)
	for {
		select {
		case r := <-b.reqs:
			batch = append(batch[:0], r)
		case <-b.stop:
			return
		}
		// The first request woke this reader, which then runs next, before
		// the goroutines that were about to queue theirs (on one processor,
		// --procs 1, always): yielding once lets them, so a busy replica
		// sends full batches instead of one command each. With nothing
		// else to run it returns at once. 32 clients polling tasks/get on
		// one core: 1.9x the rate, 30 instead of 51 µs of CPU per get
		// (taskgate and redis-server), Redis 5 instead of 13.
		runtime.Gosched()
	more:
		for len(batch) < batchMax {
			select {
			case r := <-b.reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		b.run(batch)
		// The slots would otherwise keep the requests, their commands and
		// replies (payloads up to the result limit) until overwritten.
		clear(batch)
	}
}

// run executes batch as one pipeline, bounded by the latest deadline of its
// requests; a request whose ctx already ended is skipped.
func (b *readBatcher) run(batch []*readReq) {
	var dl time.Time
	p := b.rdb.Pipeline()
	n := 0
	var cmds []redis.Cmder // for WAIT only
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			// Its caller may see done before its own ctx: the command
			// must carry the reason it was not sent, not an empty reply.
			r.cmd.SetErr(err)
			continue
		}
		if d, ok := r.ctx.Deadline(); !ok {
			dl = time.Now().Add(time.Hour)
		} else if d.After(dl) {
			dl = d
		}
		_ = p.Process(r.ctx, r.cmd)
		if b.wait.on() {
			cmds = append(cmds, r.cmd)
		}
		n++
	}
	if n > 0 {
		ctx, cancel := context.WithDeadline(context.Background(), dl)
		check := b.wait.add(ctx, p, cmds)
		_, _ = p.Exec(ctx) // errors are on each command
		check()
		cancel()
	}
	for _, r := range batch {
		close(r.done)
	}
}

func (b *readBatcher) close() {
	b.once.Do(func() { close(b.stop) })
	b.start.Do(func() {}) // no readers start after this
	b.wg.Wait()
}

// direct runs cmd alone on a connection from the client's pool, holding
// one of largeLanes (lane); for commands with a large payload (argument or
// reply) that must not hold up a batch.
func (b *readBatcher) direct(ctx context.Context, cmd redis.Cmder) error {
	ctx, release, err := b.lane(ctx)
	if err != nil {
		return err
	}
	defer release()
	return b.alone(ctx, cmd)
}

// lane takes one of largeLanes and returns the context to run the large
// operation under and the function that gives the lane back.
//
// Waiting for a lane is queueing behind this process's own large
// transfers, not a store that fails to answer, so ctx's deadline does not
// end it: the time ctx had left when lane was called starts when the lane
// is taken (ctx's cancellation still ends the wait and the operation, and
// the wait is capped at laneWaitMax). Under a burst of large results on a
// loaded machine, 50 simultaneous 8 MiB outcomes each waited longer than a
// 3 s --store-timeout for one of the 4 lanes; failing them made the
// runners send all 8 MiB again. Once it has its lane, the operation gets
// at least largeOpTimeout.
func (b *readBatcher) lane(ctx context.Context) (context.Context, func(), error) {
	budget := DefaultOpTimeout
	if dl, ok := ctx.Deadline(); ok {
		budget = time.Until(dl)
	}
	budget = max(budget, largeOpTimeout)
	select {
	case b.lanes <- struct{}{}:
	default:
		if err := b.awaitLane(ctx); err != nil {
			return ctx, nil, err
		}
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(budget, 0))
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel()
		}
	})
	return lctx, func() {
		stop()
		cancel()
		<-b.lanes
	}, nil
}

// alone runs cmd by itself on a connection from the pool, followed by
// WAIT when that is on and cmd writes; the caller holds a lane.
func (b *readBatcher) alone(ctx context.Context, cmd redis.Cmder) error {
	if !b.wait.on() || !isWrite(cmd) {
		_ = b.rdb.Process(ctx, cmd)
		return cmd.Err()
	}
	p := b.rdb.Pipeline()
	_ = p.Process(ctx, cmd)
	check := b.wait.add(ctx, p, []redis.Cmder{cmd})
	_, _ = p.Exec(ctx)
	check()
	return cmd.Err()
}

// laneWaitMax bounds how long direct waits for a lane.
const laneWaitMax = time.Minute

// largeOpTimeout is the least time an operation on a lane gets once it has
// its lane, whatever is left of the caller's --store-timeout: moving a
// payload of megabytes takes Redis longer than a small command, the more
// so on a loaded machine. In CI (two cores, the race-detector builds of
// other tests running), the reply to an 8 MiB SET took longer than 3 s
// while Redis was up: the runner logged the store unavailable and sent
// the outcome again. 30 s is 1 MiB/s for the largest result
// (--max-result-size's default, 32 MiB). The connection's own read and
// write timeouts (Open's defaults) are no shorter.
const largeOpTimeout = 30 * time.Second

// awaitLane takes a lane, or fails when ctx is cancelled (not when its
// deadline passes), the batcher closes or laneWaitMax passes.
func (b *readBatcher) awaitLane(ctx context.Context) error {
	limit := time.NewTimer(laneWaitMax)
	defer limit.Stop()
	done := ctx.Done()
	for {
		select {
		case b.lanes <- struct{}{}:
			return nil
		case <-b.stop:
			return errClosed
		case <-limit.C:
			return fmt.Errorf("waited %v for a connection for a large payload: %w", laneWaitMax, context.DeadlineExceeded)
		case <-done:
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return ctx.Err()
			}
			done = nil // the deadline passed: keep waiting
		}
	}
}

// argsSize is the number of payload bytes in args (strings and byte
// slices; numbers are small).
func argsSize(args []any) int {
	n := 0
	for _, a := range args {
		switch v := a.(type) {
		case string:
			n += len(v)
		case []byte:
			n += len(v)
		case json.RawMessage:
			n += len(v)
		}
	}
	return n
}
