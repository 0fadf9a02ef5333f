package main

import (
	"io"
	"testing"
)

// --procs defaults to 1, yields to a GOMAXPROCS variable unless given
// itself, and 0 keeps Go's choice.
func TestProcsFor(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want int
	}{
		{"default", nil, nil, 1},
		{"flag", []string{"--procs", "3"}, nil, 3},
		{"flag zero keeps Go's choice", []string{"--procs", "0"}, nil, 0},
		{"TASKGATE_PROCS", nil, map[string]string{"TASKGATE_PROCS": "2"}, 2},
		{"GOMAXPROCS without flag", nil, map[string]string{"GOMAXPROCS": "4"}, 0},
		{"flag over GOMAXPROCS", []string{"--procs", "2"}, map[string]string{"GOMAXPROCS": "4"}, 2},
		{"TASKGATE_PROCS over GOMAXPROCS", nil, map[string]string{"TASKGATE_PROCS": "1", "GOMAXPROCS": "4"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			o, err := parseArgs(append([]string{"--upstream", "http://127.0.0.1:1/mcp"}, tc.args...), io.Discard, getenv)
			if err != nil {
				t.Fatalf("parseArgs: %v", err)
			}
			if got := procsFor(o, getenv); got != tc.want {
				t.Errorf("procsFor = %d, want %d", got, tc.want)
			}
		})
	}
	if _, err := parseArgs([]string{"--upstream", "http://127.0.0.1:1/mcp", "--procs", "-1"}, io.Discard,
		func(string) string { return "" }); err == nil {
		t.Error("--procs -1 accepted")
	}
}
