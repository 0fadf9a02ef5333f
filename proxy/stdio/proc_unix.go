//go:build unix

package stdio

import "syscall"

// procAttr puts the child in a process group of its own, so that stopping
// it reaches everything it started (npx starts node, shells start
// programs) and a signal to taskgate's group is not delivered to it twice.
func procAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(a)
	return a
}

// terminateGroup sends SIGTERM to the process group of pid.
func terminateGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGTERM) }

// killGroup sends SIGKILL to the process group of pid.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
