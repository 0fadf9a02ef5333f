package sched

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"unsafe"
)

const (
	policyOther = 0 // SCHED_OTHER (SCHED_NORMAL)
	policyBatch = 3 // SCHED_BATCH
)

// batch is set once SetBatch has put the process under the batch policy.
var batch atomic.Bool

// Active reports whether SetBatch has put the process under the batch
// policy.
func Active() bool { return batch.Load() }

// Supported reports whether this system has the batch policy.
func Supported() bool { return true }

// SetBatch puts every thread of the process under the batch policy; the
// Go runtime's later threads inherit it from the thread that creates them.
// It reports how many threads it set.
func SetBatch() (int, error) {
	seen := map[int]bool{}
	// A thread created while the list is read may be cloned from one not
	// yet set: read it again until a pass finds no new thread.
	for pass := 0; pass < 10; pass++ {
		tids, err := threads()
		if err != nil {
			return len(seen), err
		}
		added := false
		for _, tid := range tids {
			if seen[tid] {
				continue
			}
			if err := setPolicy(tid, policyBatch); err != nil {
				if err == syscall.ESRCH {
					continue // the thread ended
				}
				return len(seen), fmt.Errorf("setting the batch scheduling policy of thread %d: %w", tid, err)
			}
			seen[tid] = true
			added = true
		}
		if !added {
			break
		}
	}
	batch.Store(true)
	return len(seen), nil
}

// Start runs start (a child process's start) on a thread under the
// normal policy when the process runs under the batch one, so that the
// child, which inherits its policy from the thread that forks it, runs as
// it would without taskgate.
func Start(start func() error) error {
	if !batch.Load() {
		return start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := setPolicy(0, policyOther); err != nil {
		return start() // keep going: the child then runs batched
	}
	defer func() { _ = setPolicy(0, policyBatch) }()
	return start()
}

// policyOf returns the scheduling policy of thread tid (0: the calling
// thread): "batch", "normal" or another name.
func policyOf(tid int) (string, error) {
	r, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETSCHEDULER, uintptr(tid), 0, 0)
	if e != 0 {
		return "", e
	}
	switch r {
	case policyOther:
		return "normal", nil
	case policyBatch:
		return "batch", nil
	}
	return "policy " + strconv.Itoa(int(r)), nil
}

func setPolicy(tid, policy int) error {
	var param struct{ priority int32 }
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, uintptr(tid), uintptr(policy), uintptr(unsafe.Pointer(&param)))
	if e != 0 {
		return e
	}
	return nil
}

func threads() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}
