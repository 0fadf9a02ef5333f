package engine

import (
	"sync"
	"time"
)

// rateLimiter is a token bucket per owner for task operations (T-77):
// rate tokens per second, up to burst. Lookups of unknown tasks cost more
// (missCost), which slows down id enumeration (E-42). Buckets live in
// memory per process, in two generations so idle owners are forgotten.
// Safe for concurrent use; a zero rate disables it.
type rateLimiter struct {
	rate, burst float64
	mu          sync.Mutex
	cur, old    map[string]*bucket
	max         int
	now         func() time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

// missCost is what a lookup that found no task costs, in operations.
const missCost = 5

func newRateLimiter(rate float64, burst int, max int) *rateLimiter {
	return &rateLimiter{rate: rate, burst: float64(burst), cur: map[string]*bucket{}, max: max, now: time.Now}
}

// allow takes cost tokens from owner's bucket. When it cannot, it returns
// false and how long until enough tokens are back.
func (l *rateLimiter) allow(owner string, cost float64) (bool, time.Duration) {
	if l == nil || l.rate <= 0 {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.cur[owner]
	if b == nil {
		if b = l.old[owner]; b == nil {
			b = &bucket{tokens: l.burst, last: now}
		}
		if len(l.cur) >= l.max {
			l.old, l.cur = l.cur, make(map[string]*bucket, l.max)
		}
		l.cur[owner] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens < cost {
		return false, time.Duration((cost - b.tokens) / l.rate * float64(time.Second))
	}
	b.tokens -= cost
	return true, 0
}

// low reports whether owner has less than half of its burst left (as of
// its last operation). Always false when the limiter is off.
func (l *rateLimiter) low(owner string) bool {
	if l == nil || l.rate <= 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.cur[owner]
	if b == nil {
		b = l.old[owner]
	}
	if b == nil {
		return false
	}
	tokens := min(l.burst, b.tokens+l.now().Sub(b.last).Seconds()*l.rate)
	return tokens < l.burst/2
}

// charge takes extra tokens after the fact (a miss), never blocking.
func (l *rateLimiter) charge(owner string, cost float64) {
	if l == nil || l.rate <= 0 {
		return
	}
	l.mu.Lock()
	if b := l.cur[owner]; b != nil {
		b.tokens -= cost
	}
	l.mu.Unlock()
}
