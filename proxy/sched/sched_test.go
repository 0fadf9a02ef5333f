//go:build linux

package sched

import (
	"os/exec"
	"runtime"
	"sync"
	"testing"
)

// SetBatch puts every thread under the batch policy, threads the runtime
// creates later inherit it, and a child started through Start runs under
// the normal policy while the thread that forked it goes back to batch.
func TestBatchThreadsNormalChildren(t *testing.T) {
	n, err := SetBatch()
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Errorf("SetBatch set %d threads; a Go process has several", n)
	}
	tids, err := threads()
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		if p, err := policyOf(tid); err == nil && p != "batch" {
			t.Errorf("thread %d: policy %s after SetBatch, want batch", tid, p)
		}
	}

	// New threads: goroutines locked to their threads while others run
	// force the runtime to create more.
	var wg sync.WaitGroup
	pols := make([]string, 8)
	release := make(chan struct{})
	for i := range pols {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			pols[i], _ = policyOf(0)
			<-release
		}()
	}
	close(release)
	wg.Wait()
	for i, p := range pols {
		if p != "batch" {
			t.Errorf("goroutine %d's thread: policy %q, want batch (inherited)", i, p)
		}
	}

	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep program for the child process")
	}
	cmd := exec.Command("sleep", "10")
	var forker string
	if err := Start(func() error {
		err := cmd.Start()
		forker, _ = policyOf(0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if forker != "normal" {
		t.Errorf("the forking thread ran under %q during Start, want normal", forker)
	}
	child, err := policyOf(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if child != "normal" {
		t.Errorf("child process: policy %s, want normal", child)
	}
	runtime.LockOSThread()
	p, _ := policyOf(0)
	runtime.UnlockOSThread()
	if p != "batch" {
		t.Errorf("a thread after Start: policy %s, want batch", p)
	}
}
