//go:build !linux

package sched

import "errors"

// Supported reports whether this system has the batch policy.
func Supported() bool { return false }

// Active reports false: the batch policy is Linux's.
func Active() bool { return false }

// SetBatch does nothing here: the batch policy is Linux's.
func SetBatch() (int, error) { return 0, errors.New("the batch scheduling policy needs Linux") }

// Start runs start.
func Start(start func() error) error { return start() }

// Policy is not known here.
func Policy(tid int) (string, error) {
	return "", errors.New("scheduling policies are read on Linux only")
}
