// Drives the official tasks requester library (@modelcontextprotocol/ext-tasks,
// its withTasks session over a small 2026-07-28 HTTP session port written
// here) against one MCP endpoint: each scenario calls a tool of
// `legacy-mcp --fixtures` and prints one JSON line {name, status, text?,
// error?} with what the library settled on. Usage: node client.mjs URL.
import { withTasks, resultFromTaskOutcome } from "@modelcontextprotocol/ext-tasks/client";

const url = process.argv[2];
const VERSION = "2026-07-28";
const VERSION_KEY = "io.modelcontextprotocol/protocolVersion";
const CAPS_KEY = "io.modelcontextprotocol/clientCapabilities";
let nextId = 0;

// lastMessage returns the JSON-RPC response in an SSE body.
const lastMessage = (text) => {
  let msg;
  for (const block of text.split(/\r?\n\r?\n/)) {
    const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
    if (data === "") continue;
    const m = JSON.parse(data);
    if (m.method === undefined) msg = m;
  }
  return msg;
};

// port is the session port the library drives: the 2026 wire's framing
// (_meta version and capabilities, MCP-Protocol-Version, Mcp-Method and
// Mcp-Name headers) over fetch, one request per dispatch.
const port = {
  endpointId: url,
  taskCapabilities: { generation: "v2", capabilities: {} },
  invalidated: false,
  async dispatch(request, options) {
    const params = structuredClone(request.params ?? {});
    const meta = params._meta ?? {};
    meta[VERSION_KEY] = VERSION;
    meta[CAPS_KEY] = { ...(meta[CAPS_KEY] ?? {}), elicitation: {} };
    params._meta = meta;
    const headers = {
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      "MCP-Protocol-Version": VERSION,
      "Mcp-Method": request.method,
    };
    const name = request.method === "tools/call" ? params.name : params.taskId;
    if (typeof name === "string") headers["Mcp-Name"] = name;
    const res = await fetch(url, {
      method: "POST", headers, signal: options?.signal,
      body: JSON.stringify({ jsonrpc: "2.0", id: ++nextId, method: request.method, params }),
    });
    const text = await res.text();
    const msg = (res.headers.get("content-type") ?? "").startsWith("text/event-stream") ? lastMessage(text) : JSON.parse(text);
    if (msg === undefined) throw new Error(`HTTP ${res.status} without a JSON-RPC response`);
    return msg.error !== undefined ? { kind: "error", error: msg.error } : { kind: "result", result: msg.result };
  },
  onServerRequest: () => () => {},
  onNotification: () => () => {},
  onInvalidated: () => () => {},
};

// Every question is answered with what the fixtures ask for.
const session = withTasks(port, {
  onInputRequest: async () => ({ action: "accept", content: { confirm: true, name: "Alice" } }),
});

const scenarios = [
  ["greet", { name: "Ada" }],
  ["slow_compute", { seconds: 1, label: "one" }],
  ["failing_job", {}],
  ["protocol_error_job", {}],
  ["confirm_delete", { filename: "a.txt" }],
  ["test_tool_with_task", {}],
];
for (const [tool, args] of scenarios) {
  const out = { name: tool };
  try {
    const execution = await session.callTool(tool, args, { task: { preference: "allow" } });
    const { outcome } = await execution.settle();
    out.status = outcome.status;
    if (outcome.status === "completed") {
      const result = resultFromTaskOutcome(outcome);
      out.text = (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
      out.isError = result.isError === true;
    } else if (outcome.status === "failed") {
      out.error = String(outcome.error?.message ?? outcome.error);
    }
  } catch (err) {
    out.status = "threw";
    out.error = `${err?.name}: ${err?.message}${err?.cause ? " (cause: " + JSON.stringify(err.cause?.issues ?? String(err.cause)) + ")" : ""}`;
  }
  console.log(JSON.stringify(out));
}
await session.close();
