// The interop matrix's client scenario, shared by the JavaScript client
// drivers (tsv1-client.mjs, tsv2-client.mjs). The Go test runs the same
// scenario with the Go clients; the steps and the output shape must match
// (e2e/interop/drivers_test.go).
//
// A driver is started with one JSON argument (the cell):
//   {"target": {"url": "http://…/mcp"} | {"command": "…", "args": [...], "env": {...}},
//    "era": "2025" | "2026", "gateway": true|false,
//    "plain":    {"name": …, "arguments": {…}},   a tool call with a plain result
//    "progress": {…},                           a tool that reports progress
//    "elicit":   {…},                           a tool that asks the user
//    "error":    {…},                           a call that fails
//    "cancel":   {…, "stats": "stats"}}         a slow tool; stats reports calls/cancelled
// and prints one JSON object: a key per step, each {"ok": bool, "error": "…", …}.
// The servers have no tasks: the task steps (task result, task progress,
// elicitation, the error as a task, cancel of a task) make task-augmented
// calls only with "gateway": true; directly they make the same calls plain.

export const ELICIT_ANSWER = { answer: 'yes' };
const STEP_TIMEOUT_MS = 20000;

// normalize keeps what two runs must agree on: content, structuredContent, isError.
export function normalize(result) {
  if (result === undefined || result === null) return null;
  const out = { content: result.content ?? [] };
  if (result.structuredContent !== undefined) out.structuredContent = result.structuredContent;
  if (result.isError) out.isError = true;
  return out;
}

export function errorInfo(err) {
  const code = typeof err?.code === 'number' ? err.code : undefined;
  return { message: String(err?.message ?? err).slice(0, 300), ...(code === undefined ? {} : { code }) };
}

// outcome: what a call ended with, for the error-mapping check.
async function outcome(fn) {
  try {
    const r = await fn();
    return { kind: r?.isError ? 'isError' : 'result', result: normalize(r) };
  } catch (err) {
    return { kind: 'rpcError', ...errorInfo(err) };
  }
}

async function step(out, key, fn) {
  const t0 = Date.now();
  out[key] = { ok: false, error: { message: 'did not finish before the driver timed out' } };
  let timer;
  try {
    // A step that hangs fails after STEP_TIMEOUT_MS; the later steps still run.
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${STEP_TIMEOUT_MS} ms`)), STEP_TIMEOUT_MS);
    });
    out[key] = { ok: true, ...(await Promise.race([fn(), timeout])) };
  } catch (err) {
    out[key] = { ok: false, error: errorInfo(err) };
  }
  clearTimeout(timer);
  out[key].ms = Date.now() - t0;
}

const deadline = (ms) => Date.now() + ms;

async function statsOf(c, cfg) {
  const r = await c.call(cfg.cancel.stats, {});
  const s = r.structuredContent ?? JSON.parse(r.content?.[0]?.text ?? '{}');
  return { started: s.calls?.[cfg.cancel.name] ?? 0, cancelled: s.cancelled ?? 0 };
}

async function pollStats(c, cfg, cond) {
  const end = deadline(10000);
  for (;;) {
    const s = await statsOf(c, cfg);
    if (cond(s) || Date.now() > end) return s;
    await new Promise((r) => setTimeout(r, 50));
  }
}

// run drives adapter c through the cell's steps.
export async function run(c, cfg, out = {}) {
  await step(out, 'init', () => c.connect());
  if (!out.init.ok) return out;
  await step(out, 'tools', async () => {
    const tools = await c.listTools();
    const taskSupport = {};
    for (const t of tools) if (t.taskSupport) taskSupport[t.name] = t.taskSupport;
    return { names: tools.map((t) => t.name).sort(), taskSupport };
  });
  if (cfg.plain) {
    await step(out, 'plain', async () => ({ result: normalize(await c.call(cfg.plain.name, cfg.plain.arguments)) }));
    // Directly the same call is made plain, so a stateful server sees the
    // same sequence of calls both ways.
    await step(out, 'task', async () => {
      c.lastViaTask = undefined;
      const result = normalize(await (cfg.gateway ? c.callTask : c.call)(cfg.plain.name, cfg.plain.arguments, {}));
      return { result, ...(c.lastViaTask === undefined ? {} : { viaTask: c.lastViaTask }) };
    });
  }
  if (cfg.progress) {
    await step(out, 'progress', async () => {
      let plain = 0;
      await c.call(cfg.progress.name, cfg.progress.arguments, { onprogress: () => plain++ });
      const res = { plain };
      if (cfg.gateway && c.taskProgress) {
        let task = 0;
        await c.callTask(cfg.progress.name, cfg.progress.arguments, { onprogress: () => task++ });
        res.task = task;
      }
      return res;
    });
  }
  if (cfg.elicit) {
    await step(out, 'elicit', async () => {
      const r = cfg.gateway ? await c.callTask(cfg.elicit.name, cfg.elicit.arguments, {})
        : await c.call(cfg.elicit.name, cfg.elicit.arguments);
      return { result: normalize(r), asked: c.asked };
    });
  }
  if (cfg.error) {
    await step(out, 'error', async () => {
      const res = { plain: await outcome(() => c.call(cfg.error.name, cfg.error.arguments)) };
      res.task = await outcome(() => (cfg.gateway ? c.callTask : c.call)(cfg.error.name, cfg.error.arguments, {}));
      return res;
    });
  }
  if (cfg.cancel) {
    await step(out, 'cancel', async () => {
      const before = await statsOf(c, cfg);
      let stop;
      if (cfg.gateway && c.startTask) {
        stop = await c.startTask(cfg.cancel.name, cfg.cancel.arguments);
      } else {
        const ac = new AbortController();
        const p = c.call(cfg.cancel.name, cfg.cancel.arguments, { signal: ac.signal }).catch(() => {});
        stop = async () => { ac.abort(); await p; };
      }
      const started = await pollStats(c, cfg, (s) => s.started > before.started);
      await stop();
      const after = await pollStats(c, cfg, (s) => s.cancelled > before.cancelled);
      return { started: started.started > before.started, reached: after.cancelled > before.cancelled };
    });
  }
  return out;
}

// main runs the driver: parse the cell, run, print, close.
export async function main(makeAdapter) {
  const cfg = JSON.parse(process.argv[2]);
  const c = await makeAdapter(cfg);
  // On timeout the steps done so far are printed; the running one reads as failed.
  const out = {};
  const timer = setTimeout(() => { process.stdout.write(JSON.stringify(out) + '\n'); process.exit(3); }, 170000);
  try {
    await run(c, cfg, out);
  } finally {
    await Promise.race([c.close().catch(() => {}), new Promise((r) => setTimeout(r, 2000))]);
  }
  clearTimeout(timer);
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(0);
}
