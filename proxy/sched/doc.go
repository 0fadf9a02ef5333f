// Package sched puts taskgate's threads under the kernel's batch
// scheduling policy (Linux SCHED_BATCH) and starts child processes under
// the normal one.
//
// Beside an upstream on the same cores, a proxy is woken every time the
// upstream writes: by default the woken thread preempts the upstream at
// once, often in the middle of its answer (between an SSE event and the
// end of its body), and each such switch costs both processes a thread
// switch, cold caches and, for a Go upstream, its runtime's monitor thread
// retaking a processor from a system call that seemed slow. Under the batch
// policy a woken thread waits for the running one to block or use up its
// slice, then finds the whole answer at once. Its share of the CPU is
// unchanged (same nice value); only wake-up preemption goes. With taskgate
// and the go-sdk demo on one core this cut taskgate's CPU per proxied
// request by a fifth to two fifths in three runs; with one client it added
// no latency.
//
// Child processes (stdio upstreams) must not inherit the policy: Start
// runs their fork on a thread set back to the normal policy for the
// moment.
package sched
