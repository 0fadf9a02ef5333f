// Validates JSON documents against the 2026-07-28 tasks schemas that the
// official requester library @modelcontextprotocol/ext-tasks ships (its
// "core/v2" entry point: the zod schemas its client decodes every answer
// with). Input: one JSON object a line on stdin, {"name": label, "schema":
// export name (e.g. "GetTaskResultV2Schema"), "value": document}. Output:
// one JSON line each, {"name", "schema", "ok", "issues"?}, in order. Exits
// 0 when every document is valid, 1 when one is not, 2 on bad input.
import * as v2 from "@modelcontextprotocol/ext-tasks/core/v2";
import { createInterface } from "node:readline";

// issue is a zod issue as JSON: its path and message, and for a union the
// issues of each alternative.
const issue = (i) => {
  const o = { path: i.path, message: i.message };
  if (Array.isArray(i.errors)) o.alternatives = i.errors.map((alt) => alt.map(issue));
  return o;
};

let bad = 0;
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (line.trim() === "") continue;
  let doc;
  try {
    doc = JSON.parse(line);
  } catch (err) {
    console.error(`validate.mjs: input line is not JSON: ${err.message}`);
    process.exit(2);
  }
  const schema = v2[doc.schema];
  if (typeof doc.schema !== "string" || !doc.schema.endsWith("Schema") || !schema || typeof schema.safeParse !== "function") {
    console.error(`validate.mjs: ${JSON.stringify(doc.schema)} is not a schema of @modelcontextprotocol/ext-tasks/core/v2`);
    process.exit(2);
  }
  const parsed = schema.safeParse(doc.value);
  const out = { name: doc.name, schema: doc.schema, ok: parsed.success };
  if (!parsed.success) {
    bad++;
    out.issues = parsed.error.issues.map(issue);
  }
  console.log(JSON.stringify(out));
}
process.exit(bad > 0 ? 1 : 0);
