package proxy

import (
	"time"

	"github.com/taskgate/taskgate/proxy/engine"
)

// Defaults of Config, in one place. Config.setDefaults puts them into the
// fields a caller left zero (or, where documented, negative), and
// cmd/taskgate's flags show them as their defaults, so the proxy used as a
// library and the command behave the same without a flag.
const (
	DefaultMaxBodySize       = 4 << 20  // Config.MaxBodySize, bytes
	DefaultMaxResultSize     = 32 << 20 // Config.MaxResultSize, bytes
	DefaultStreamIdleTimeout = 10 * time.Minute
	DefaultStreamMaxLifetime = time.Hour
	DefaultUpstreamIdleConn  = 3 * time.Second
	DefaultDialTimeout       = 5 * time.Second
	DefaultKeepAlive         = 15 * time.Second
	DefaultLease             = 15 * time.Second
	DefaultStoreTimeout      = 3 * time.Second
	DefaultTaskRate          = 100 // Config.TaskRate, operations per second
	DefaultTaskBurst         = 500
	DefaultQueueMax          = 256
	DefaultListPageSize      = 50
	DefaultMaxTasksPerOwner  = 100
	DefaultPromoteWindow     = 250 * time.Millisecond
	DefaultPollHold          = engine.PollHold // Config.PollHold
)
