package stdio

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/proxy/sched"
)

// child is one running stdio server process. Its stdin is written under
// wmu by any goroutine; its stdout is read by session.readLoop only; its
// stderr by logStderr.
type child struct {
	cmd    *exec.Cmd
	pid    int
	stdin  *os.File
	stdout *os.File
	stderr *os.File
	wmu    sync.Mutex
	grace  time.Duration
	wto    time.Duration

	exited chan struct{} // closed after the process was reaped
	state  *os.ProcessState
	// stopping is set when taskgate ends the child on purpose (session
	// end, shutdown): its exit is then not a crash.
	stopMu   sync.Mutex
	stopping bool
	stopOnce sync.Once
}

// startChild starts cfg.Command with the inherited environment plus
// cfg.Env, in its own process group, with pipes on all three streams.
func startChild(cfg *Config) (*child, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	cmd.Env = append(os.Environ(), cfg.Env...)
	cmd.Dir = cfg.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = procAttr()
	// Under taskgate's batch scheduling policy the child would inherit it.
	err = sched.Start(cmd.Start)
	// The child holds its ends now; ours would keep its stdin open and
	// hide its exit from the stdout reader.
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("starting %s: %w", cfg.Command[0], err)
	}
	c := &child{cmd: cmd, pid: cmd.Process.Pid, stdin: inW, stdout: outR, stderr: errR,
		grace: cfg.StopGrace, wto: cfg.WriteTimeout, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		c.state = cmd.ProcessState
		// Anything the server started in its group goes with it.
		killGroup(c.pid)
		close(c.exited)
	}()
	return c, nil
}

// errNotReading is returned for a write the child did not take in time.
var errNotReading = errors.New("the stdio MCP server is not reading its input")

// send writes one message and its newline to the child's stdin.
func (c *child) send(line []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.stdin.SetWriteDeadline(time.Now().Add(c.wto))
	buf := make([]byte, 0, len(line)+1)
	buf = append(append(buf, line...), '\n')
	_, err := c.stdin.Write(buf)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errNotReading
	}
	return err
}

// exitStatus describes how the process ended ("exit status 1", "signal:
// killed"); it must be called after exited is closed.
func (c *child) exitStatus() string {
	if c.state == nil {
		return "unknown exit status"
	}
	return c.state.String()
}

func (c *child) isStopping() bool {
	c.stopMu.Lock()
	defer c.stopMu.Unlock()
	return c.stopping
}

// stop ends the process: stdin closed, then StopGrace to exit, then SIGTERM
// to its process group and another StopGrace, then SIGKILL. It returns once
// the process was reaped. Safe to call more than once and concurrently.
func (c *child) stop() {
	c.stopMu.Lock()
	c.stopping = true
	c.stopMu.Unlock()
	c.stopOnce.Do(func() {
		c.wmu.Lock()
		_ = c.stdin.Close()
		c.wmu.Unlock()
		select {
		case <-c.exited:
		case <-time.After(c.grace):
			terminateGroup(c.pid)
			select {
			case <-c.exited:
			case <-time.After(c.grace):
				killGroup(c.pid)
			}
		}
	})
	<-c.exited
}

// kill ends the process group at once (a child that never answered
// initialize, or one that closed its output).
func (c *child) kill() {
	c.stopMu.Lock()
	c.stopping = true
	c.stopMu.Unlock()
	killGroup(c.pid)
	<-c.exited
}

// closeOutput closes taskgate's ends of stdout and stderr, once the
// readers are done.
func (c *child) closeFiles() {
	c.wmu.Lock()
	_ = c.stdin.Close()
	c.wmu.Unlock()
	_ = c.stdout.Close()
	_ = c.stderr.Close()
}

// stderrLineMax is where a logged stderr line is cut.
const stderrLineMax = 4 << 10

// logStderr logs the child's stderr line by line, at most perSec lines a
// second with bursts of ten times that; it counts what it drops and says
// so in the next line logged. It returns at EOF.
func logStderr(c *child, log zerolog.Logger, perSec int) {
	br := bufio.NewReaderSize(c.stderr, 16<<10)
	burst := float64(10 * perSec)
	tokens, last := burst, time.Now()
	dropped := 0
	for {
		line, err := readCapped(br, stderrLineMax)
		if len(line) > 0 || err == nil {
			now := time.Now()
			tokens = min(burst, tokens+now.Sub(last).Seconds()*float64(perSec))
			last = now
			if tokens >= 1 {
				tokens--
				e := log.Info().Str("stderr", strings.TrimRight(line, "\r"))
				if dropped > 0 {
					e = e.Int("stderr_dropped", dropped)
					dropped = 0
				}
				e.Msg("stdio server stderr")
			} else {
				dropped++
			}
		}
		if err != nil {
			if dropped > 0 {
				log.Warn().Int("stderr_dropped", dropped).Msg("stdio server stderr lines dropped (rate limit)")
			}
			return
		}
	}
}

// readCapped reads one line, keeping at most max bytes of it (the rest is
// read and dropped, marked with "…").
func readCapped(br *bufio.Reader, max int) (string, error) {
	var b []byte
	cut := false
	for {
		chunk, err := br.ReadSlice('\n')
		if err == nil {
			chunk = chunk[:len(chunk)-1]
		}
		if room := max - len(b); room > 0 {
			b = append(b, chunk[:min(room, len(chunk))]...)
			if len(chunk) > room {
				cut = true
			}
		} else if len(chunk) > 0 {
			cut = true
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		s := string(b)
		if cut {
			s += "…"
		}
		return s, err
	}
}
