package main

import (
	"math/bits"
	"time"
)

// histSubBits sets the histogram's precision: each power of two is split
// into 2^histSubBits buckets, so a bucket is at most 1/128 (0.8 %) wide.
const histSubBits = 7

const (
	histSub     = 1 << histSubBits
	histBuckets = histSub + (64-histSubBits)*(histSub/2)
)

// hist is a log-linear latency histogram in nanoseconds (HDR-style): exact
// below 128 ns, then 64 buckets per power of two. Not safe for concurrent
// use; each worker keeps its own and they are merged at the end.
type hist struct {
	counts   [histBuckets]uint64
	n        uint64
	sum      uint64
	min, max uint64
}

func histIndex(v uint64) int {
	if v < histSub {
		return int(v)
	}
	e := bits.Len64(v) - histSubBits // >= 1
	m := v >> uint(e)                // in [histSub/2, histSub)
	return histSub + (e-1)*(histSub/2) + int(m-histSub/2)
}

// histLow is the smallest value of bucket i; histHigh the largest.
func histLow(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	i -= histSub
	e := i/(histSub/2) + 1
	m := uint64(i%(histSub/2) + histSub/2)
	return m << uint(e)
}

func histHigh(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	if i+1 >= histBuckets {
		return ^uint64(0)
	}
	return histLow(i+1) - 1
}

func (h *hist) record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[histIndex(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += v
}

func (h *hist) merge(o *hist) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// quantile returns the q-quantile (0 < q <= 1): the midpoint of the bucket
// holding it, clamped to the observed min and max.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			v := (histLow(i) + histHigh(i)) / 2
			return time.Duration(min(max(v, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}

func (h *hist) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / h.n)
}
