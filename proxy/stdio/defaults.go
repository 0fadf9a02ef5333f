package stdio

import "time"

// Defaults of Config, in one place: Config.setDefaults puts them into the
// fields a caller left zero, and cmd/taskgate's --stdio-* flags show them as
// their defaults.
const (
	DefaultMaxChildren  = 64
	DefaultIdleTimeout  = 15 * time.Minute
	DefaultInitTimeout  = 30 * time.Second
	DefaultStopGrace    = 5 * time.Second
	DefaultMaxLineSize  = 32 << 20 // bytes
	DefaultWriteTimeout = 30 * time.Second
	DefaultKeepAlive    = 15 * time.Second
	DefaultQueueMax     = 256
	DefaultStderrLines  = 100 // lines per second
)
