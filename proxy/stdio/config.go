package stdio

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Server. Zero fields take the documented defaults.
type Config struct {
	// Command is the program and its arguments, e.g. ["npx", "-y",
	// "@modelcontextprotocol/server-memory"]. Required. It comes from
	// taskgate's configuration only; nothing in a request changes it.
	Command []string
	// Env is added to the environment taskgate was started with, as
	// NAME=VALUE entries; a name given here overrides the inherited value.
	// Values are never logged (they often hold tokens).
	Env []string
	// Dir is the child's working directory. Default: taskgate's.
	Dir string
	// MaxChildren bounds the server processes running at once (one per
	// client session). An initialize over it gets HTTP 503 with a JSON-RPC
	// error. Default 64.
	MaxChildren int
	// IdleTimeout ends a session, and its process, that has had no request
	// in flight, no open GET stream and no traffic for this long.
	// Default 15m.
	IdleTimeout time.Duration
	// InitTimeout bounds the wait for the child's answer to initialize,
	// process start included; a child that does not answer in time is
	// killed. Default 30s.
	InitTimeout time.Duration
	// MaxLineSize bounds one message from the child, in bytes. A longer
	// line is dropped (the call it answers, when it can be told, gets a
	// JSON-RPC error); it never ends the process. Default 32 MiB.
	MaxLineSize int
	// StopGrace is each step of stopping a child: after its stdin is
	// closed it has StopGrace to exit, then SIGTERM and another StopGrace,
	// then SIGKILL (to its whole process group). Default 5s.
	StopGrace time.Duration
	// WriteTimeout bounds one write to a child's stdin; a child that does
	// not read its input for this long fails the request. Default 30s.
	WriteTimeout time.Duration
	// QueueMax bounds the messages waiting for a session's GET stream;
	// above it the oldest notifications are dropped (never requests).
	// Default 256.
	QueueMax int
	// StderrLines bounds the child's stderr lines logged per second
	// (bursts up to ten times that); the rest are counted and the count
	// is logged. Lines are cut at 4 KiB. Default 100.
	StderrLines int
	// KeepAlive is the interval of SSE comments on streams that are
	// otherwise silent, which also notices callers that left. Default 15s.
	KeepAlive time.Duration
	// SessionLabel turns a session id into what logs show instead of it.
	// Default: the first 12 hex digits of its SHA-256. Server.SetSessionLabel
	// can replace it later (taskgate uses the proxy's keyed hash, so that
	// both logs name a session the same way).
	SessionLabel func(sid []byte) string
	// Shared runs one child for all client sessions instead of one per
	// session, for stateless servers: requests reach it under taskgate's
	// own ids and progress tokens, so each answer reaches only its caller;
	// what the child sends on its own (requests, notifications other than
	// progress) reaches no session. Default false.
	Shared bool
	// Metrics, when set, registers the Server's collectors
	// (taskgate_stdio_*). Default: not registered.
	Metrics prometheus.Registerer
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.MaxChildren <= 0 {
		c.MaxChildren = DefaultMaxChildren
	}
	def(&c.IdleTimeout, DefaultIdleTimeout)
	def(&c.InitTimeout, DefaultInitTimeout)
	def(&c.StopGrace, DefaultStopGrace)
	def(&c.WriteTimeout, DefaultWriteTimeout)
	def(&c.KeepAlive, DefaultKeepAlive)
	if c.MaxLineSize <= 0 {
		c.MaxLineSize = DefaultMaxLineSize
	}
	if c.QueueMax <= 0 {
		c.QueueMax = DefaultQueueMax
	}
	if c.StderrLines <= 0 {
		c.StderrLines = DefaultStderrLines
	}
}

func (c *Config) validate() error {
	if len(c.Command) == 0 || c.Command[0] == "" {
		return errors.New("stdio: a command is required")
	}
	for _, kv := range c.Env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.ContainsAny(name, "\x00") {
			// Never echo the entry: its value may be a secret.
			return fmt.Errorf("stdio: environment entry %q must be NAME=VALUE", safeName(kv))
		}
	}
	return nil
}

// safeName is what an error may show of an environment entry: the part
// before '=' (the name), never the value.
func safeName(kv string) string {
	name, _, _ := strings.Cut(kv, "=")
	if len(name) > 64 {
		name = name[:64] + "…"
	}
	return name
}

// SplitCommand splits a command line into words the way a POSIX shell
// splits a simple command, without expanding anything: words are
// separated by blanks; single quotes keep everything literally; double
// quotes keep everything but \" \\ \$ \` and a backslash-newline; a
// backslash outside quotes escapes the next character. Variables, globs,
// pipes and redirections are not interpreted (a '$' or '|' is literal).
func SplitCommand(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated single quote")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`\n", s[i+1]) >= 0 {
					i++
					if s[i] == '\n' {
						continue
					}
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New("unterminated double quote")
			}
			inWord = true
		case c == '\\':
			if i+1 >= len(s) {
				return nil, errors.New("trailing backslash")
			}
			i++
			if s[i] != '\n' {
				cur.WriteByte(s[i])
				inWord = true
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, errors.New("empty command")
	}
	return words, nil
}
