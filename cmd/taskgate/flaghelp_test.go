package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"4194304", 4 << 20, true}, {"4MiB", 4 << 20, true}, {"4 MiB", 4 << 20, true}, {"4mib", 4 << 20, true},
		{"512KiB", 512 << 10, true}, {"1GiB", 1 << 30, true}, {"100B", 100, true},
		{"2MB", 2000000, true}, {"64kB", 64000, true},
		{"4XB", 0, false}, {"MiB", 0, false}, {"", 0, false}, {"4.5MiB", 0, false}, {"4 M", 0, false},
		{"4096GiB", 0, false},
	} {
		got, err := parseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	for n, want := range map[int]string{4 << 20: "4MiB", 1536 << 10: "1536KiB", 1000: "1000", 1 << 30: "1GiB"} {
		v := sizeValue(n)
		if got := v.String(); got != want {
			t.Errorf("sizeValue(%d).String() = %q, want %q", n, got, want)
		}
	}
}

// Every size flag and its variable take units.
func TestSizeFlagsTakeUnits(t *testing.T) {
	env := map[string]string{"TASKGATE_MAX_RESULT_SIZE": "512KiB"}
	o, err := parseArgs([]string{"--upstream-command", "x", "--max-body-size", "4MiB", "--stdio-max-line", "64 KiB"}, io.Discard,
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if o.maxBodySize != 4<<20 || o.maxResultSize != 512<<10 || o.stdioMaxLine != 64<<10 {
		t.Errorf("sizes %d %d %d; want 4MiB 512KiB 64KiB", o.maxBodySize, o.maxResultSize, o.stdioMaxLine)
	}
}

func TestNearestFlag(t *testing.T) {
	fs := newFlagSet(&options{})
	for in, want := range map[string]string{
		"upstrem": "upstream", "upstraem": "upstream", "max_body_size": "max-body-size", "adminlisten": "admin-listen",
		"lese": "lease", "shutdown": "shutdown-grace", "bogus": "", "x": "", "sched": "sched-batch",
	} {
		if got := nearestFlag(fs, in); got != want {
			t.Errorf("nearestFlag(%q) = %q, want %q", in, got, want)
		}
	}
	_, err := parseArgs([]string{"--upstrem", "http://127.0.0.1:1/mcp"}, io.Discard, func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "did you mean --upstream?") {
		t.Errorf("--upstrem: %v; want a hint naming --upstream", err)
	}
	_, err = parseArgs([]string{"--bogus"}, io.Discard, func(string) string { return "" })
	if err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("--bogus: %v; want no hint", err)
	}
}

func TestUnknownEnv(t *testing.T) {
	fs := newFlagSet(&options{})
	got := unknownEnv(fs, []string{"TASKGATE_UPSTREM=http://x", "TASKGATE_UPSTREAM=http://y", "HOME=/root",
		"TASKGATE_TOTALLY_ELSE=secret", "TASKGATE_LISTEN=:1"})
	want := [][2]string{{"TASKGATE_TOTALLY_ELSE", ""}, {"TASKGATE_UPSTREM", "TASKGATE_UPSTREAM"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("unknownEnv = %q, want %q", got, want)
	}
	var _ flag.Getter = new(sizeValue)
}
