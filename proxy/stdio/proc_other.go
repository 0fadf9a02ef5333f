//go:build !unix

package stdio

import (
	"os"
	"syscall"
)

// procAttr: no process groups here; stopping kills the child only.
func procAttr() *syscall.SysProcAttr { return nil }

func terminateGroup(pid int) { killGroup(pid) }

func killGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}
