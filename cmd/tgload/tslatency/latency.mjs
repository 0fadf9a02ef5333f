// Latency of tool calls as seen by the official TypeScript MCP SDK client:
// callToolStream through taskgate (which runs the call as a task when the
// tool is advertised with taskSupport optional or required, then polls
// tasks/get at the reported pollInterval and reads tasks/result), against a
// plain callTool on the upstream directly.
//
//   npm ci && node latency.mjs --direct http://127.0.0.1:3000/mcp \
//     --taskgate http://127.0.0.1:8080/mcp --tool slow \
//     --args '{"seconds":3}' --n 5
//
// It prints one line per target with min, median, p90 and max in ms and,
// through taskgate, the tasks/get polls per call (the SDK polls once right
// after the CreateTaskResult, then once per reported pollInterval), and
// the difference of the medians. It measures; it asserts nothing.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

function parseArgs(argv) {
  const o = { direct: '', taskgate: '', tool: 'slow', args: '{"seconds":0.002}', n: 20, warmup: 2 };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i].replace(/^--/, '');
    if (k === 'help' || k === 'h') {
      console.log('usage: node latency.mjs --direct URL --taskgate URL [--tool NAME] [--args JSON] [--n N] [--warmup N]');
      process.exit(0);
    }
    if (!(k in o)) throw new Error(`unknown flag --${k}`);
    o[k] = argv[++i];
  }
  o.n = Number(o.n);
  o.warmup = Number(o.warmup);
  o.args = JSON.parse(o.args);
  return o;
}

async function connect(url) {
  const client = new Client({ name: 'tgload-tslatency', version: '1' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  await client.listTools(); // lets callToolStream see each tool's taskSupport
  return client;
}

// once runs one call and returns its wall time in ms, whether it ran as
// a task and how many tasks/get it sent.
async function once(client, tool, args) {
  const start = performance.now();
  let asTask = false;
  let polls = 0;
  for await (const m of client.experimental.tasks.callToolStream({ name: tool, arguments: args }, undefined, { timeout: 3600000, maxTotalTimeout: 3600000 })) {
    if (m.type === 'taskCreated') asTask = true;
    if (m.type === 'taskStatus') polls++;
    if (m.type === 'error') throw m.error;
    if (m.type === 'result') break;
  }
  return { ms: performance.now() - start, asTask, polls };
}

function stats(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  return { min: s[0], p50: q(0.5), p90: q(0.9), max: s[s.length - 1] };
}

async function measure(name, url, o) {
  const client = await connect(url);
  for (let i = 0; i < o.warmup; i++) await once(client, o.tool, o.args);
  const ms = [];
  let tasks = 0;
  let polls = 0;
  for (let i = 0; i < o.n; i++) {
    const r = await once(client, o.tool, o.args);
    ms.push(r.ms);
    polls += r.polls;
    if (r.asTask) tasks++;
  }
  await client.close();
  const st = stats(ms);
  const f = (x) => x.toFixed(1);
  console.log(`${name.padEnd(9)} ${o.tool} ${JSON.stringify(o.args)} n=${o.n} as_task=${tasks} ms: min ${f(st.min)} p50 ${f(st.p50)} p90 ${f(st.p90)} max ${f(st.max)} polls/call ${(polls / o.n).toFixed(1)}`);
  return st;
}

const o = parseArgs(process.argv);
const results = {};
if (o.direct) results.direct = await measure('direct', o.direct, o);
if (o.taskgate) results.taskgate = await measure('taskgate', o.taskgate, o);
if (results.direct && results.taskgate) {
  console.log(`taskgate - direct (p50): ${(results.taskgate.p50 - results.direct.p50).toFixed(1)} ms`);
}
