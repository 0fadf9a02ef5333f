package stdio

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// fakeEnv selects the fake stdio server mode of the test binary
// (comma-separated flags: early, noinit).
const fakeEnv = "TASKGATE_STDIO_FAKE"

// fakeServer is a scripted stdio MCP server: the test binary runs it as
// its child. Tools: echo (answer written in several partial writes),
// progress, garbage (invalid JSON before the answer), big (an answer of
// arguments.size bytes), ask (an elicitation request first), die (exit 3),
// hang (never answers), pid, env (a variable's value).
func fakeServer(mode string) int {
	var wmu sync.Mutex
	write := func(parts ...string) {
		wmu.Lock()
		defer wmu.Unlock()
		for i, p := range parts {
			_, _ = os.Stdout.WriteString(p)
			if i < len(parts)-1 {
				time.Sleep(2 * time.Millisecond) // partial writes reach the reader separately
			}
		}
	}
	if strings.Contains(mode, "early") {
		write(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}` + "\n")
		write("this line is not JSON\n")
	}
	fmt.Fprintln(os.Stderr, "fake stdio server ready")
	answers := map[string]chan json.RawMessage{}
	var amu sync.Mutex
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name string         `json:"name"`
				Args map[string]any `json:"arguments"`
				Meta struct {
					Token json.RawMessage `json:"progressToken"`
				} `json:"_meta"`
			} `json:"params"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			fmt.Fprintln(os.Stderr, "fake: bad input line")
			continue
		}
		if m.Method == "" {
			amu.Lock()
			if ch := answers[string(m.ID)]; ch != nil {
				ch <- m.Result
			}
			amu.Unlock()
			continue
		}
		if m.ID == nil {
			continue // notifications
		}
		id := string(m.ID)
		result := func(v any) string {
			b, _ := json.Marshal(v)
			return `{"jsonrpc":"2.0","id":` + id + `,"result":` + string(b) + "}\n"
		}
		text := func(s string) string {
			return result(map[string]any{"content": []any{map[string]any{"type": "text", "text": s}}})
		}
		switch {
		case m.Method == "initialize":
			if strings.Contains(mode, "noinit") {
				continue
			}
			if strings.Contains(mode, "refuse") {
				write(`{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32602,"message":"unsupported protocol version"}}` + "\n")
				continue
			}
			write(result(map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "fake", "version": "0"}}))
		case m.Method != "tools/call":
			write(result(map[string]any{}))
		default:
			go func() {
				switch m.Params.Name {
				case "echo":
					out := text(fmt.Sprint(m.Params.Args["text"]))
					write(out[:5], out[5:len(out)/2], out[len(out)/2:])
				case "progress":
					write(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":` + string(m.Params.Meta.Token) + `,"progress":1,"total":2}}` + "\n")
					write(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"half"}}` + "\n")
					write(text("done"))
				case "garbage":
					write("{not json\n", `{"jsonrpc":"1.0"}`+"\n", text("after garbage"))
				case "big":
					n := int(m.Params.Args["size"].(float64))
					write(`{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":"` + strings.Repeat("b", n) + `"}]}}` + "\n")
				case "ask":
					ch := make(chan json.RawMessage, 1)
					amu.Lock()
					answers[`"srv-1"`] = ch
					amu.Unlock()
					write(`{"jsonrpc":"2.0","id":"srv-1","method":"elicitation/create","params":{"message":"ok?","requestedSchema":{"type":"object"}}}` + "\n")
					res := <-ch
					write(text("answer " + string(res)))
				case "ping-then-answer":
					write(`{"jsonrpc":"2.0","id":"srv-2","method":"ping"}`+"\n", text("pinged"))
				case "die":
					os.Exit(3)
				case "hang":
				case "pid":
					write(text(fmt.Sprint(os.Getpid())))
				case "env":
					write(text(os.Getenv(fmt.Sprint(m.Params.Args["name"]))))
				}
			}()
		}
	}
	return 0
}
