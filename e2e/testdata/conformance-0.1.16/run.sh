#!/usr/bin/env bash
# Runs the server scenarios of the MCP conformance suite 0.1.16 (the last
# 2025-era release of @modelcontextprotocol/conformance, pinned in
# package-lock.json) against an MCP endpoint and prints, per scenario, how
# many checks passed and failed, then a total line. The scenarios call the
# tools, resources and prompts of `legacy-mcp --everything`.
#
#   run.sh URL [LABEL] [SCENARIO...]
#
# LABEL names the results folder (results/LABEL) and prefixes each line.
# Without SCENARIOs the suite's active scenarios run (its default); name
# scenarios to run others (json-schema-2020-12 and server-sse-polling are
# pending in this release). Installs the suite with `npm ci` when
# node_modules is missing. Exit status: 0 when no check failed, 1 when one
# did, 2 on a usage or setup error.
set -euo pipefail
cd "$(dirname "$0")"
url=${1:?usage: run.sh URL [LABEL] [SCENARIO...]}
label=${2:-run}
shift $(( $# >= 2 ? 2 : 1 ))
if [ ! -d node_modules/@modelcontextprotocol/conformance ]; then
  npm ci --no-audit --no-fund --loglevel=error >&2 || exit 2
fi
out=results/$label
rm -rf "$out"
mkdir -p "$out"
suite=(node --import ../conformance/node20-register.mjs node_modules/@modelcontextprotocol/conformance/dist/index.js server --url "$url")
# The suite exits 1 when a check fails; the counts below say which.
if [ $# -eq 0 ]; then
  "${suite[@]}" -o "$out" >"$out/suite.log" 2>&1 || true
else
  for s in "$@"; do
    "${suite[@]}" --scenario "$s" -o "$out" >>"$out/suite.log" 2>&1 || true
  done
fi
failed_any=0
node - "$out" "$label" <<'JS' || failed_any=1
const fs = require('node:fs'), path = require('node:path');
const [out, label] = process.argv.slice(2);
// Results land in OUT/server-<scenario>-<timestamp>/checks.json.
const runs = fs.readdirSync(out).filter((d) => fs.existsSync(path.join(out, d, 'checks.json'))).sort();
const byScenario = new Map();
for (const d of runs) byScenario.set(d.replace(/^server-/, '').replace(/-\d{4}-\d\d-\d\dT[\d-]+Z$/, ''), d);
if (byScenario.size === 0) {
  console.log(`${label}: no checks (see ${out}/suite.log)`);
  process.exit(1);
}
let tp = 0, tf = 0, bad = false;
for (const [s, d] of byScenario) {
  const checks = JSON.parse(fs.readFileSync(path.join(out, d, 'checks.json'), 'utf8'));
  const n = (st) => checks.filter((c) => c.status === st).length;
  const p = n('SUCCESS'), f = n('FAILURE'), other = checks.length - p - f;
  tp += p; tf += f;
  if (f > 0) bad = true;
  const failed = checks.filter((c) => c.status === 'FAILURE').map((c) => c.id);
  const others = [...new Set(checks.filter((c) => c.status !== 'SUCCESS' && c.status !== 'FAILURE').map((c) => c.status))];
  console.log(`${label} ${s}: ${p} passed, ${f} failed` + (other ? `, ${other} other (${others.join('/')})` : '') +
    (failed.length ? ` [failed: ${failed.join(', ')}]` : ''));
}
console.log(`${label} total: ${tp} passed, ${tf} failed`);
process.exit(bad ? 1 : 0);
JS
exit $failed_any
