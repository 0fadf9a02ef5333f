// Interop driver: the official TypeScript SDK v1 client (@modelcontextprotocol/sdk),
// 2025-11-25 wire; tasks through client.experimental.tasks. See scenario.mjs.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ElicitRequestSchema, CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { main, ELICIT_ANSWER } from './scenario.mjs';

await main(async (cfg) => {
  const client = new Client({ name: 'interop-tsv1', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } } });
  const a = { asked: 0, taskProgress: true };
  client.setRequestHandler(ElicitRequestSchema, async () => { a.asked++; return { action: 'accept', content: ELICIT_ANSWER }; });
  const transport = cfg.target.url
    ? new StreamableHTTPClientTransport(new URL(cfg.target.url))
    : new StdioClientTransport({ command: cfg.target.command, args: cfg.target.args ?? [],
      env: { ...process.env, ...(cfg.target.env ?? {}) }, stderr: 'ignore' });
  const streamTask = async function* (name, args, opts) {
    yield* client.experimental.tasks.callToolStream({ name, arguments: args }, CallToolResultSchema,
      { task: { ttl: 60000 }, ...(opts?.onprogress ? { onprogress: opts.onprogress } : {}) });
  };
  a.connect = async () => {
    await client.connect(transport);
    return { server: client.getServerVersion()?.name };
  };
  a.listTools = async () => (await client.listTools()).tools.map((t) => ({ name: t.name, taskSupport: t.execution?.taskSupport }));
  a.call = (name, args, opts = {}) => client.callTool({ name, arguments: args }, CallToolResultSchema,
    { ...(opts.onprogress ? { onprogress: opts.onprogress } : {}), ...(opts.signal ? { signal: opts.signal } : {}) });
  a.callTask = async (name, args, opts) => {
    for await (const m of streamTask(name, args, opts)) {
      if (m.type === 'result') return m.result;
      if (m.type === 'error') throw m.error;
    }
    throw new Error('task stream ended without a result');
  };
  a.startTask = async (name, args) => {
    const it = streamTask(name, args, {});
    const first = await it.next();
    if (first.value?.type !== 'taskCreated') throw new Error(`no task created: ${JSON.stringify(first.value)}`);
    const id = first.value.task.taskId;
    return async () => { await client.experimental.tasks.cancelTask(id); await it.return(); };
  };
  a.close = () => client.close();
  return a;
});
