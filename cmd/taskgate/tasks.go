package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/taskgate/taskgate/proxy/admin"
)

// Exit statuses of `taskgate tasks`.
const (
	tasksOK          = 0 // done
	tasksRefused     = 1 // the server answered no: no such task, already finished, token refused, API off, bad filter
	tasksUsage       = 2 // bad command line, or the token file cannot be read
	tasksUnreachable = 3 // the admin server (or its task store) could not be reached or failed
)

const tasksUsageText = `Usage:
  taskgate tasks list [--status S[,S...]] [--tool T] [--runner R] [--older-than D] [--limit N] [--cursor C] [--json]
  taskgate tasks get ID [--json]
  taskgate tasks cancel ID [--json]

Talks to the admin task API of a running taskgate (--admin-listen, as for
the server; an unspecified host such as 0.0.0.0 means this machine's
loopback) with the token in --admin-token-file. Both default to the
TASKGATE_ADMIN_LISTEN and TASKGATE_ADMIN_TOKEN_FILE variables, so in the
server's container the command needs no flags.

Statuses: working, input_required, completed, failed, cancelled.
Output: a table for people; --json prints the API's JSON for scripts.
Exit status: 0 done; 1 refused (no such task, already finished, token
refused, admin API off, bad filter); 2 bad usage or unreadable token file;
3 the admin server or its task store cannot be reached.

Flags:
`

// tasksCLI is one `taskgate tasks` (or `taskgate reload`) invocation.
type tasksCLI struct {
	prog           string // "taskgate tasks" or "taskgate reload", for messages
	stdout, stderr io.Writer
	base           string // http://host:port
	token          string
	json           bool
	timeout        time.Duration
}

// tasksCommand runs `taskgate tasks SUBCOMMAND ...` and returns the exit
// status.
func tasksCommand(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := stderr
		if len(args) > 0 {
			w = stdout
		}
		fmt.Fprint(w, tasksUsageText)
		fs, _ := tasksFlags("", &tasksCLI{}, new(string), new(string), &listFlags{})
		fs.SetOutput(w)
		fs.PrintDefaults()
		if len(args) == 0 {
			return tasksUsage
		}
		return tasksOK
	}
	sub := args[0]
	if sub != "list" && sub != "get" && sub != "cancel" {
		fmt.Fprintf(stderr, "taskgate tasks: unknown subcommand %q: want list, get or cancel (taskgate tasks --help)\n", sub)
		return tasksUsage
	}
	return adminCommand("taskgate tasks", sub, args[1:], stdout, stderr, getenv)
}

// reloadUsageText is `taskgate reload --help`.
const reloadUsageText = `Usage: taskgate reload [--admin-listen ADDR] [--admin-token-file FILE] [--json]

Asks a running taskgate to re-read its --config policy file, as SIGHUP does
(POST /admin/v1/reload of the admin API): for images without a shell or
kill. A file that does not load is refused and the previous policy stays.
Exit status: 0 reloaded; 1 refused (the file does not load, no --config,
token refused, admin API off); 2 bad usage or unreadable token file; 3 the
admin server cannot be reached.

Flags:
`

// reloadCommand runs `taskgate reload ...`.
func reloadCommand(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return adminCommand("taskgate reload", "reload", args, stdout, stderr, getenv)
}

// adminCommand runs subcommand sub of prog against the admin API: its
// flags (after or between positional arguments), the admin address and
// token from flags or TASKGATE_* variables, then the request.
func adminCommand(prog, sub string, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	c := &tasksCLI{prog: prog, stdout: stdout, stderr: stderr}
	var addr, tokenFile string
	var lf listFlags
	fs, set := tasksFlags(sub, c, &addr, &tokenFile, &lf)
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		if sub == "reload" {
			fmt.Fprint(stdout, reloadUsageText)
		} else {
			fmt.Fprint(stdout, tasksUsageText)
		}
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return tasksOK
	}
	if err == nil {
		switch {
		case (sub == "list" || sub == "reload") && len(pos) > 0:
			err = fmt.Errorf("unexpected argument %q", pos[0])
		case (sub == "get" || sub == "cancel") && len(pos) != 1:
			err = fmt.Errorf("%s takes one task id, got %d arguments", sub, len(pos))
		}
	}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if v := getenv(envName("admin-listen")); !set["admin-listen"] && v != "" {
		addr = v
	}
	if v := getenv(envName("admin-token-file")); !set["admin-token-file"] && v != "" {
		tokenFile = v
	}
	if err == nil && addr == "" {
		err = errors.New("--admin-listen is empty: give the admin server's address")
	}
	if err == nil {
		err = checkListen("--admin-listen", addr)
	}
	if err == nil && tokenFile == "" {
		err = errors.New("no token: give --admin-token-file (or TASKGATE_ADMIN_TOKEN_FILE), the file the server reads its admin token from")
	}
	if err == nil {
		var b []byte
		if b, err = os.ReadFile(tokenFile); err != nil {
			err = fmt.Errorf("--admin-token-file: %w", err)
		} else if c.token = strings.TrimSpace(string(b)); c.token == "" {
			err = fmt.Errorf("--admin-token-file %s: the file holds no token", tokenFile)
		}
	}
	if err != nil {
		name := prog + " " + sub // "taskgate tasks get"
		if sub == "reload" {
			name = prog
		}
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return tasksUsage
	}
	c.base = adminBaseURL(addr)
	switch sub {
	case "list":
		return c.list(lf)
	case "get":
		return c.get(pos[0])
	case "reload":
		return c.reload()
	default:
		return c.cancel(pos[0])
	}
}

// listFlags are the filters of `taskgate tasks list`.
type listFlags struct {
	status, tool, runner, cursor string
	olderThan                    time.Duration
	limit                        int
}

// tasksFlags defines the flags of subcommand sub ("" = all, for --help).
func tasksFlags(sub string, c *tasksCLI, addr, tokenFile *string, lf *listFlags) (*flag.FlagSet, map[string]bool) {
	fs := flag.NewFlagSet("taskgate "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(addr, "admin-listen", defaultAdminListen, "the taskgate admin address [TASKGATE_ADMIN_LISTEN]")
	fs.StringVar(tokenFile, "admin-token-file", "", "file holding the admin token [TASKGATE_ADMIN_TOKEN_FILE]")
	fs.BoolVar(&c.json, "json", false, "print JSON (the API's answer) instead of a table")
	durationVar(fs, &c.timeout, "timeout", 10*time.Second, "bound on the request")
	if sub == "list" || sub == "" {
		fs.StringVar(&lf.status, "status", "", "list tasks in these statuses only (comma-separated)")
		fs.StringVar(&lf.tool, "tool", "", "list tasks of this tool only")
		fs.StringVar(&lf.runner, "runner", "", "list tasks whose call runs in this taskgate process only")
		durationVar(fs, &lf.olderThan, "older-than", 0, "list tasks created more than this long ago only, e.g. 10m")
		fs.IntVar(&lf.limit, "limit", 100, "at most this many tasks (1-1000), newest first")
		fs.StringVar(&lf.cursor, "cursor", "", "continue a list after the page that printed this cursor")
	}
	return fs, map[string]bool{}
}

// parseInterleaved parses flags that may follow positional arguments
// (`tasks get ID --json`) and returns the positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// adminBaseURL is the admin server's URL for a listen address; an
// unspecified host means this machine's loopback.
func adminBaseURL(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// call sends one API request and decodes a 200 answer into out. Any
// other outcome is printed and returned as an exit status.
func (c *tasksCLI) call(method, path string, out any) (body []byte, code int) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		fmt.Fprintf(c.stderr, "%s: %v\n", c.prog, err)
		return nil, tasksUsage
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(c.stderr, "%s: cannot reach the admin server at %s: %v\n", c.prog, c.base, err)
		return nil, tasksUnreachable
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		fmt.Fprintf(c.stderr, "%s: reading the answer of %s: %v\n", c.prog, c.base, err)
		return nil, tasksUnreachable
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error, Code string }
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(body))
		}
		fmt.Fprintf(c.stderr, "%s: %s (HTTP %d)\n", c.prog, e.Error, resp.StatusCode)
		if resp.StatusCode >= 500 {
			return nil, tasksUnreachable
		}
		return nil, tasksRefused
	}
	if err := json.Unmarshal(body, out); err != nil {
		fmt.Fprintf(c.stderr, "%s: %s answered something that is not the admin API's JSON: %v\n", c.prog, c.base, err)
		return nil, tasksUnreachable
	}
	return body, tasksOK
}

func (c *tasksCLI) list(lf listFlags) int {
	q := url.Values{}
	if lf.status != "" {
		q.Set("status", lf.status)
	}
	if lf.tool != "" {
		q.Set("tool", lf.tool)
	}
	if lf.runner != "" {
		q.Set("runner", lf.runner)
	}
	if lf.olderThan > 0 {
		q.Set("olderThan", lf.olderThan.String())
	}
	if lf.cursor != "" {
		q.Set("cursor", lf.cursor)
	}
	q.Set("limit", fmt.Sprint(lf.limit))
	var page admin.TaskList
	body, code := c.call(http.MethodGet, "/admin/v1/tasks?"+q.Encode(), &page)
	if code != tasksOK {
		return code
	}
	if c.json {
		c.stdout.Write(body)
		return tasksOK
	}
	now := time.Now()
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATUS\tTOOL\tAGE\tOWNER\tRUNNER\tERA\tMESSAGE")
	for _, t := range page.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.TaskID, t.Status, t.Tool, ageOf(now, t.CreatedAt),
			short(t.Owner, 12), t.Runner, dash(t.Era), oneLine(t.StatusMessage, 60))
	}
	tw.Flush()
	if len(page.Tasks) == 0 {
		fmt.Fprintln(c.stderr, "no task matches")
	}
	if page.NextCursor != "" {
		fmt.Fprintf(c.stderr, "more tasks: add --cursor %s\n", page.NextCursor)
	}
	return tasksOK
}

func (c *tasksCLI) get(id string) int {
	var t admin.Task
	body, code := c.call(http.MethodGet, "/admin/v1/tasks/"+url.PathEscape(id), &t)
	if code != tasksOK {
		return code
	}
	if c.json {
		c.stdout.Write(body)
		return tasksOK
	}
	c.printTask(&t)
	return tasksOK
}

func (c *tasksCLI) cancel(id string) int {
	var t admin.Task
	body, code := c.call(http.MethodPost, "/admin/v1/tasks/"+url.PathEscape(id)+"/cancel", &t)
	if code != tasksOK {
		return code
	}
	if c.json {
		c.stdout.Write(body)
		return tasksOK
	}
	fmt.Fprintf(c.stdout, "task %s %s: %s\n", t.TaskID, t.Status, t.StatusMessage)
	return tasksOK
}

func (c *tasksCLI) reload() int {
	var r admin.ReloadResult
	body, code := c.call(http.MethodPost, "/admin/v1/reload", &r)
	if code != tasksOK {
		return code
	}
	if c.json {
		c.stdout.Write(body)
		return tasksOK
	}
	fmt.Fprintln(c.stdout, "policy reloaded; requests from now on use it")
	return tasksOK
}

func (c *tasksCLI) printTask(t *admin.Task) {
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	for _, kv := range [][2]string{
		{"task", t.TaskID}, {"status", t.Status}, {"message", dash(t.StatusMessage)}, {"tool", t.Tool},
		{"owner", t.Owner}, {"created", t.CreatedAt + " (" + ageOf(time.Now(), t.CreatedAt) + " ago)"},
		{"updated", t.LastUpdatedAt}, {"ttl", (time.Duration(t.TTL) * time.Millisecond).String()},
		{"runner", t.Runner}, {"era", dash(t.Era)},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	tw.Flush()
}

// ageOf renders the time since the RFC 3339 instant ts, to the second.
func ageOf(now time.Time, ts string) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return "?"
	}
	return max(now.Sub(t), 0).Truncate(time.Second).String()
}

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a status message on one table line.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n-1] + "…"
	}
	return s
}
