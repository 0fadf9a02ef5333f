package main

// CPU use of other processes, read from /proc/<pid>/stat (--cpu).

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// readCPU returns the user+system CPU seconds of each name: the sum over
// its processes.
func readCPU(ps []namedPID) map[string]float64 {
	out := map[string]float64{}
	for _, p := range ps {
		if v, ok := procCPU(p.pid); ok {
			out[p.name] += v
		}
	}
	return out
}

// clkTck is USER_HZ, 100 on every Linux architecture Go supports.
const clkTck = 100

func procCPU(pid int) (float64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// Fields after the command (which may hold spaces) start after ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return float64(ut+st) / clkTck, true
}
