package engine

import (
	"testing"
	"time"

	"github.com/taskgate/taskgate/taskstore"
)

// PollInterval: a running task's interval starts at PollStart and grows
// with its age up to the policy's bound; a terminal task and a thrifty
// owner get the bound.
func TestPollInterval(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		age     time.Duration
		status  taskstore.Status
		thrifty bool
		want    time.Duration
	}{
		{0, taskstore.Working, false, PollStart},
		{4 * time.Second, taskstore.Working, false, PollStart + 100*time.Millisecond},
		{time.Hour, taskstore.Working, false, 2 * time.Second},
		{0, taskstore.Working, true, 2 * time.Second},
		{0, taskstore.Completed, false, 2 * time.Second},
	} {
		tk := &taskstore.Task{Status: tc.status, CreatedAt: created, PollInterval: 2 * time.Second}
		if got := PollInterval(tk, created.Add(tc.age), tc.thrifty); got != tc.want {
			t.Errorf("age %v, %s, thrifty %v: %v, want %v", tc.age, tc.status, tc.thrifty, got, tc.want)
		}
	}
}
