// A small MCP server on the TypeScript SDK v2 (@modelcontextprotocol/server),
// without tasks: the TS v2 server of taskgate's interop matrix. It serves
// both protocol eras from one factory: 2026-07-28 (per-request envelope) and
// the SDK's stateless 2025-11-25 fallback.
//
//   node tsv2-server.mjs --stdio              stdio (one connection)
//   node tsv2-server.mjs --listen 127.0.0.1:0 Streamable HTTP at /mcp; prints
//                                             "listening on http://ADDR/mcp" to stderr
//
// Tools: echo {text}; slow {seconds, steps} (progress per step, ends early
// when cancelled); ask {question} (elicitation: elicitation/create on the
// 2025 era, an input-required result on the 2026 era); fail {reason}
// (isError result); stats (calls and cancelled calls of this process).
import http from 'node:http';
import { McpServer, createMcpHandler, inputRequired, acceptedContent } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import * as z from 'zod';

// Process-wide counters: the HTTP entry makes a server instance per request.
const stats = { calls: {}, cancelled: 0 };
const text = (t) => ({ content: [{ type: 'text', text: t }] });

function makeServer({ era }) {
  const s = new McpServer({ name: 'tsv2-server', version: '1.0.0' }, { capabilities: { logging: {} } });
  const count = (name) => { stats.calls[name] = (stats.calls[name] ?? 0) + 1; };
  s.registerTool('echo', { description: 'Returns the text.', inputSchema: z.object({ text: z.string() }) },
    async ({ text: t }) => { count('echo'); return text(t); });
  s.registerTool('slow', {
    description: 'Sleeps seconds in steps, reporting progress per step; stops early when cancelled.',
    inputSchema: z.object({ seconds: z.number(), steps: z.number().optional() }),
  }, async ({ seconds, steps }, ctx) => {
    count('slow');
    const n = steps ?? Math.max(1, Math.ceil(seconds));
    const token = ctx.mcpReq._meta?.progressToken;
    const signal = ctx.mcpReq.signal;
    for (let i = 1; i <= n; i++) {
      const stopped = await new Promise((resolve) => {
        const timer = setTimeout(() => resolve(false), (seconds * 1000) / n);
        signal?.addEventListener('abort', () => { clearTimeout(timer); resolve(true); }, { once: true });
      });
      if (stopped || signal?.aborted) {
        stats.cancelled++;
        return { ...text(`slow: cancelled after step ${i - 1} of ${n}`), isError: true };
      }
      if (token !== undefined) {
        await ctx.mcpReq.notify({ method: 'notifications/progress',
          params: { progressToken: token, progress: i, total: n, message: `step ${i} of ${n}` } }).catch(() => {});
      }
    }
    return text(`slept ${seconds} seconds`);
  });
  const answerSchema = { type: 'object', properties: { answer: { type: 'string', description: 'Your answer.' } }, required: ['answer'] };
  s.registerTool('ask', { description: 'Asks the user (elicitation) and returns the answer.', inputSchema: z.object({ question: z.string() }) },
    async ({ question }, ctx) => {
      count('ask');
      if (era === 'modern') {
        const got = acceptedContent(ctx.mcpReq.inputResponses, 'answer');
        if (got === undefined) {
          return inputRequired({ inputRequests: { answer: inputRequired.elicit({ message: question, requestedSchema: answerSchema }) } });
        }
        return text(`you said: ${got.answer}`);
      }
      const res = await ctx.mcpReq.elicitInput({ mode: 'form', message: question, requestedSchema: answerSchema });
      if (res.action !== 'accept') return { ...text(`user did not answer: ${res.action}`), isError: true };
      return text(`you said: ${res.content?.answer}`);
    });
  s.registerTool('fail', { description: 'Returns an isError result.', inputSchema: z.object({ reason: z.string() }) },
    async ({ reason }) => { count('fail'); return { ...text(reason), isError: true }; });
  s.registerTool('stats', { description: 'Calls and cancelled calls of this process.', inputSchema: z.object({}) },
    async () => ({ ...text(JSON.stringify(stats)), structuredContent: structuredClone(stats) }));
  return s;
}

const args = process.argv.slice(2);
if (args[0] === '--stdio') {
  serveStdio(makeServer);
} else if (args[0] === '--listen') {
  const [host, port] = args[1].split(':');
  const handler = createMcpHandler(makeServer);
  const server = http.createServer(async (req, res) => {
    try {
      const chunks = [];
      for await (const c of req) chunks.push(c);
      const body = Buffer.concat(chunks);
      const ac = new AbortController();
      res.on('close', () => ac.abort());
      const request = new Request(`http://${req.headers.host}${req.url}`, {
        method: req.method, headers: req.headers, signal: ac.signal,
        body: req.method === 'GET' || req.method === 'HEAD' || body.length === 0 ? undefined : body,
      });
      const response = await handler.fetch(request);
      res.writeHead(response.status, Object.fromEntries(response.headers));
      if (response.body) {
        for await (const chunk of response.body) res.write(chunk);
      }
      res.end();
    } catch (err) {
      process.stderr.write(`tsv2-server: ${err?.stack ?? err}\n`);
      if (!res.headersSent) res.writeHead(500);
      res.end();
    }
  });
  server.listen(Number(port), host, () => {
    const a = server.address();
    process.stderr.write(`listening on http://${a.address}:${a.port}/mcp\n`);
  });
  const stop = () => server.close(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
} else {
  process.stderr.write('usage: tsv2-server.mjs --stdio | --listen HOST:PORT\n');
  process.exit(2);
}
