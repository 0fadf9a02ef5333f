package taskstore

import (
	"context"
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
type readBatcher struct {
	rdb   redis.UniversalClient
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

type readReq struct {
	ctx  context.Context
	cmd  redis.Cmder
	done chan struct{}
}

func newReadBatcher(rdb redis.UniversalClient) *readBatcher {
	return &readBatcher{rdb: rdb, reqs: make(chan *readReq, batchMax), stop: make(chan struct{})}
}

// do runs cmd in a batch; it returns when cmd has its result or ctx ends
// (then with ctx's error; the batch may still run the command).
func (b *readBatcher) do(ctx context.Context, cmd redis.Cmder) error {
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
	}
}

// run executes batch as one pipeline, bounded by the latest deadline of its
// requests; a request whose ctx already ended is skipped.
func (b *readBatcher) run(batch []*readReq) {
	var dl time.Time
	p := b.rdb.Pipeline()
	n := 0
	for _, r := range batch {
		if r.ctx.Err() != nil {
			continue
		}
		if d, ok := r.ctx.Deadline(); !ok {
			dl = time.Now().Add(time.Hour)
		} else if d.After(dl) {
			dl = d
		}
		_ = p.Process(r.ctx, r.cmd)
		n++
	}
	if n > 0 {
		ctx, cancel := context.WithDeadline(context.Background(), dl)
		_, _ = p.Exec(ctx) // errors are on each command
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
