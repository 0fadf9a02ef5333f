//go:build race

package capability

const raceEnabled = true
