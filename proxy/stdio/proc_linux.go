//go:build linux

package stdio

import "syscall"

// setDeathSignal asks the kernel to SIGKILL the child when taskgate dies
// without stopping it (SIGKILL, OOM kill), so no server outlives it.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
