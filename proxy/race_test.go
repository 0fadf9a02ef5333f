//go:build race

package proxy

// raceEnabled: the race detector makes sync.Pool drop items at random,
// so allocation budgets of pooled paths are checked without it.
const raceEnabled = true
