// Interop driver: the official TypeScript SDK v2 client (@modelcontextprotocol/client)
// with @modelcontextprotocol/ext-tasks for tasks. Era "2025": the plain
// 2025-11-25 handshake (versionNegotiation 'legacy'); era "2026": 'auto'
// (server/discover; a 2025-only server falls back to initialize). Task calls
// go through ext-tasks' session in both eras; on the 2026 wire its requests
// are sent by rawDispatch below (ext-tasks needs the host to send them).
// See scenario.mjs.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { createTaskSessionFromClient, resultFromTaskOutcome } from '@modelcontextprotocol/ext-tasks/client';
import { main, ELICIT_ANSWER } from './scenario.mjs';

const MODERN = '2026-07-28';
const clientInfo = { name: 'interop-tsv2', version: '1.0.0' };
const capabilities = { elicitation: { form: {} } };

// sseMessages yields the JSON-RPC messages of an SSE body.
async function* sseMessages(body) {
  const dec = new TextDecoder();
  let buf = '';
  for await (const chunk of body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const data = ev.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
      if (data) yield JSON.parse(data);
    }
  }
}

await main(async (cfg) => {
  const client = new Client(clientInfo, {
    capabilities,
    // The probe waits at most 10 s: a server that never answers server/discover
    // falls back to initialize on stdio and fails on HTTP (n/a then).
    versionNegotiation: cfg.era === '2026' ? { mode: 'auto', probe: { timeoutMs: 10000 } } : { mode: 'legacy' },
  });
  // ext-tasks surfaces no progress of a task's call: task progress is not counted.
  const a = { asked: 0, taskProgress: false };
  client.setRequestHandler('elicitation/create', async () => { a.asked++; return { action: 'accept', content: ELICIT_ANSWER }; });
  // Progress of task calls arrives outside a pending request: count it here.
  const progressByToken = new Map();
  client.fallbackNotificationHandler = async (n) => {
    if (n.method === 'notifications/progress') progressByToken.get(n.params?.progressToken)?.();
  };
  const transport = cfg.target.url
    ? new StreamableHTTPClientTransport(new URL(cfg.target.url), { requestInit: { headers: cfg.target.headers ?? {} } })
    : new StdioClientTransport({ command: cfg.target.command, args: cfg.target.args ?? [],
      env: { ...process.env, ...(cfg.target.env ?? {}) }, stderr: 'ignore' });

  // rawDispatch sends one framed 2026 request and returns its response.
  let rawIDs = 0;
  const rawDispatch = async (framed, options) => {
    const request = { jsonrpc: '2.0', id: `raw-${++rawIDs}`, ...framed };
    const res = await fetch(cfg.target.url, {
      method: 'POST',
      headers: {
        ...(cfg.target.headers ?? {}),
        'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': MODERN,
        'mcp-method': request.method,
        ...(request.params?.name !== undefined ? { 'mcp-name': String(request.params.name) } : {}),
        ...(request.params?.taskId !== undefined ? { 'mcp-name': String(request.params.taskId) } : {}),
      },
      body: JSON.stringify(request),
      signal: options?.signal,
    });
    const type = res.headers.get('content-type') ?? '';
    let msg;
    if (type.includes('text/event-stream')) {
      for await (const m of sseMessages(res.body)) {
        if (m.id === request.id && (m.result !== undefined || m.error !== undefined)) { msg = m; break; }
        if (m.method === 'notifications/progress') progressByToken.get(m.params?.progressToken)?.();
      }
    } else {
      msg = await res.json();
    }
    if (!msg) throw new Error(`HTTP ${res.status}: no response`);
    return msg.error ? { kind: 'error', error: msg.error } : { kind: 'result', result: msg.result };
  };

  let session;
  const tasks = () => {
    session ??= createTaskSessionFromClient(client, {
      endpointId: 'interop',
      onInputRequest: async (req) => {
        a.asked++;
        if (req.kind === 'elicitation') return { action: 'accept', content: ELICIT_ANSWER };
        throw new Error(`unexpected input request ${req.kind}`);
      },
      ...(client.getProtocolEra() === 'modern'
        ? { rawDispatch, v2RequestFraming: { protocolVersion: MODERN, clientInfo, clientCapabilities: capabilities } }
        : {}),
    });
    return session;
  };
  let tokens = 0;
  const execute = async (name, args, opts = {}) => {
    const metadata = {};
    if (opts.onprogress) {
      const token = `interop-${++tokens}`;
      progressByToken.set(token, opts.onprogress);
      metadata.progressToken = token;
    }
    return tasks().callTool(name, args, { task: { preference: 'prefer' }, metadata, requestTimeoutMs: 30000 });
  };

  a.connect = async () => {
    await client.connect(transport);
    return { server: client.getServerVersion()?.name, protocolEra: client.getProtocolEra() };
  };
  a.listTools = async () => (await client.listTools()).tools.map((t) => ({ name: t.name, taskSupport: t.execution?.taskSupport }));
  a.call = (name, args, opts = {}) => client.callTool({ name, arguments: args },
    { ...(opts.onprogress ? { onprogress: opts.onprogress } : {}), ...(opts.signal ? { signal: opts.signal } : {}) });
  a.callTask = async (name, args, opts) => {
    const ex = await execute(name, args, opts);
    const { outcome, lastTask } = await ex.settle();
    a.lastViaTask = lastTask !== undefined;
    return resultFromTaskOutcome(outcome);
  };
  a.startTask = async (name, args) => {
    const ex = await execute(name, args, {});
    const settled = ex.settle().catch(() => {});
    return async () => { await ex.cancel(); await settled; };
  };
  a.close = async () => { await session?.close(); await client.close(); };
  return a;
});
