//go:build race

package e2e

// raceEnabled builds the child binaries with -race too.
const raceEnabled = true
