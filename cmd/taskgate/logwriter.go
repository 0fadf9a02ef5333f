package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// logWriter passes log lines to an underlying writer (stderr) from one
// goroutine of its own, so that a request never waits for the write of its
// log line: a slow or blocked reader of stderr (a container runtime under
// pressure, a terminal being scrolled) would otherwise stall every request
// that logs. zerolog writes each event with one Write call; Write copies
// the line into a bounded queue and returns at once.
//
// When the queue is full (the output cannot keep up), the line is dropped
// and counted (Dropped, the metric taskgate_log_lines_dropped_total); the
// next line written says how many were dropped. Close writes every queued
// line before it returns; lines written after Close go straight to the
// underlying writer, so nothing is lost at shutdown.
type logWriter struct {
	out     io.Writer
	console bool // the lines are zerolog's console format, not JSON
	queue   chan *[]byte
	wake    chan struct{} // a half-full queue ends the writer's wait
	bufs    sync.Pool
	dropped atomic.Uint64 // total lines dropped
	unsaid  atomic.Uint64 // dropped lines not yet reported in the output

	mu     sync.RWMutex // held for writing by Close; Write holds it for reading
	closed bool
	done   chan struct{}
	// direct serialises writes to out once the writer is closed.
	direct sync.Mutex
}

// newLogWriter starts the writer's goroutine with room for size queued lines.
func newLogWriter(out io.Writer, size int) *logWriter {
	w := &logWriter{out: out, queue: make(chan *[]byte, size), wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.loop()
	return w
}

// Write queues a copy of p. It never blocks on the output.
func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		w.direct.Lock()
		defer w.direct.Unlock()
		return w.out.Write(p)
	}
	b, _ := w.bufs.Get().(*[]byte)
	if b == nil {
		b = new([]byte)
	}
	*b = append((*b)[:0], p...)
	select {
	case w.queue <- b:
		if len(w.queue) >= cap(w.queue)/2 {
			select {
			case w.wake <- struct{}{}:
			default: // already woken
			}
		}
	default:
		w.dropped.Add(1)
		w.unsaid.Add(1)
		w.bufs.Put(b)
	}
	w.mu.RUnlock()
	return len(p), nil
}

// Dropped returns how many lines were dropped since start.
func (w *logWriter) Dropped() uint64 { return w.dropped.Load() }

// flushDelay is how long the writer lets lines gather after the first one
// before it writes them: one wake-up and one write system call per batch
// instead of per line. Lines reach the output at most this late. It is not
// shorter because every write is dear beyond its own cost: a blocking
// system call wakes the Go runtime's monitor thread from its deep sleep,
// which then polls every 20 µs for a while, each poll a thread switch
// taken from the requests. With a batch every millisecond, a proxy on one
// core spent about 15% more CPU per request than with one every 50 ms.
// A queue half full cuts the wait short (Write wakes the writer), so a
// burst of lines is written rather than dropped.
const flushDelay = 50 * time.Millisecond

// maxBatch bounds the bytes of one write.
const maxBatch = 64 << 10

// loop writes queued lines in batches: it waits for a line, lets more
// gather for flushDelay or until the queue is half full (not reading the
// queue meanwhile, so writers do not wake it line by line), then writes
// everything queued.
func (w *logWriter) loop() {
	defer close(w.done)
	var batch []byte
	t := time.NewTimer(flushDelay)
	t.Stop()
	for line := range w.queue {
		batch = append(batch[:0], *line...)
		w.recycle(line)
		t.Reset(flushDelay)
		select {
		case <-t.C:
		case <-w.wake:
			t.Stop()
		}
		for {
			full := w.drain(&batch)
			if n := w.unsaid.Swap(0); n > 0 {
				batch = w.appendDropped(batch, n)
			}
			_, _ = w.out.Write(batch)
			batch = batch[:0]
			if !full {
				break
			}
		}
	}
}

// appendDropped appends the line that reports n dropped lines, in the
// format of the others.
func (w *logWriter) appendDropped(b []byte, n uint64) []byte {
	if w.console {
		return fmt.Appendf(b, "%s WRN log output could not keep up: lines dropped dropped_lines=%d\n", time.Now().Format(time.RFC3339), n)
	}
	return fmt.Appendf(b, "{\"level\":\"warn\",\"dropped_lines\":%d,\"time\":%q,\"message\":\"log output could not keep up: lines dropped\"}\n",
		n, time.Now().UTC().Format(time.RFC3339))
}

// drain appends queued lines to batch until none is queued (or the queue
// is closed) or batch holds maxBatch bytes; it reports the latter.
func (w *logWriter) drain(batch *[]byte) (full bool) {
	for len(*batch) < maxBatch {
		select {
		case line, ok := <-w.queue:
			if !ok {
				return false
			}
			*batch = append(*batch, *line...)
			w.recycle(line)
		default:
			return false
		}
	}
	return true
}

func (w *logWriter) recycle(line *[]byte) {
	if cap(*line) <= 16<<10 {
		w.bufs.Put(line)
	}
}

// Close writes the queued lines and waits until they are written. Later
// writes go to the output directly. It is idempotent.
func (w *logWriter) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	close(w.queue)
	w.mu.Unlock()
	<-w.done
	return nil
}

// logTimeFormat is the log lines' "time": RFC 3339 with milliseconds
// (zerolog's default has whole seconds, too coarse to order the lines of
// one request or to match them with traces).
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// newLogger returns the process logger writing to w. Console output is
// coloured only when isTTY (and NO_COLOR is unset). It sets zerolog's
// process-wide time format to logTimeFormat.
func newLogger(o *options, w io.Writer, isTTY bool) zerolog.Logger {
	zerolog.TimeFieldFormat = logTimeFormat
	lvl, _ := zerolog.ParseLevel(o.logLevel)
	if o.logFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: logTimeFormat, NoColor: !isTTY || os.Getenv("NO_COLOR") != ""}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// redisLogger routes go-redis's own messages (reconnect failures and the
// like) into the structured log.
type redisLogger struct{ l zerolog.Logger }

func (r redisLogger) Printf(_ context.Context, format string, args ...any) {
	r.l.Warn().Str("component", "go-redis").Msg(fmt.Sprintf(format, args...))
}
