package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/taskstore"
)

// A large result at the end of a tasks/result stream leaves in chunks of
// tens of KiB, not in the 4 KiB pieces (each one write and flush) that
// SetBodyStreamWriter's pipe gave: 256 of them per MiB.
func TestResultStreamLargeChunks(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	owner, _ := e.h.id.owner(headerOf(alice))
	now := time.Now().UTC().Truncate(time.Millisecond)
	id, _ := taskstore.NewID()
	// A call running on another process: the answer waits through the
	// store, on a stream.
	if err := e.store.Create(context.Background(), &taskstore.Task{
		ID: id, Owner: owner, Status: taskstore.Working, CreatedAt: now, UpdatedAt: now,
		TTL: time.Hour, Tool: "echo", UpstreamID: `"x"`, Runner: "other-process",
	}, taskstore.CreateOptions{Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	conn, err := e.c.Dial("taskgate")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tasks/result","params":{"taskId":%q}}`, id)
	hdr := ""
	for k, v := range alice {
		hdr += k + ": " + v + "\r\n"
	}
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: taskgate\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"MCP-Protocol-Version: 2025-11-25\r\n%sContent-Length: %d\r\n\r\n%s", hdr, len(body), body)
	br := bufio.NewReader(conn)
	chunked := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the answer's head: %v", err)
		}
		if strings.EqualFold(strings.TrimSpace(line), "Transfer-Encoding: chunked") {
			chunked = true
		}
		if line == "\r\n" {
			break
		}
	}
	if !chunked {
		t.Fatal("the answer is not a chunked stream")
	}
	const size = 1 << 20
	var got strings.Builder
	chunks, finished := 0, false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading a chunk: %v (after %d)", err, chunks)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
		if err != nil {
			t.Fatalf("chunk size %q", line)
		}
		if n == 0 {
			break
		}
		if _, err := io.CopyN(&got, br, n); err != nil {
			t.Fatal(err)
		}
		if _, err := br.Discard(2); err != nil { // the chunk's CRLF
			t.Fatal(err)
		}
		if finished {
			chunks++
		} else if strings.Contains(got.String(), "data: \n\n") {
			// The priming event is out: the task ends now, with a
			// result of a MiB.
			raw := `{"content":[{"type":"text","text":"` + strings.Repeat("x", size) + `"}]}`
			if _, err := e.store.Finish(context.Background(), owner, id, taskstore.Completed, "",
				taskstore.Outcome{Kind: taskstore.OutcomeResult, Raw: []byte(raw)}); err != nil {
				t.Fatal(err)
			}
			finished = true
		}
	}
	if !strings.Contains(got.String(), strings.Repeat("x", size)) {
		t.Fatalf("the stream (%d bytes) does not carry the result", got.Len())
	}
	if max := size / (16 << 10); chunks > max {
		t.Errorf("the result left in %d chunks, want at most %d (16 KiB or more each)", chunks, max)
	}
}
