#!/usr/bin/env bash
# Runs the official MCP conformance suite's tasks scenarios
# (@modelcontextprotocol/conformance, pinned in package-lock.json) against
# an MCP endpoint and prints, per scenario, how many checks passed and
# failed, then a total line.
#
#   run.sh URL [LABEL] [SCENARIO...]
#
# LABEL names the results folder (results/LABEL) and prefixes each line.
# Without SCENARIOs all ten tasks scenarios run. Installs the suite with
# `npm ci` when node_modules is missing. Exit status: 0 when no check
# failed, 1 when one did, 2 on a usage or setup error.
set -euo pipefail
cd "$(dirname "$0")"
url=${1:?usage: run.sh URL [LABEL] [SCENARIO...]}
label=${2:-run}
shift $(( $# >= 2 ? 2 : 1 ))
scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
  scenarios=(tasks-lifecycle tasks-capability-negotiation tasks-wire-fields tasks-request-state-removal
    tasks-mrtr-input tasks-request-headers tasks-dispatch-and-envelope tasks-status-notifications
    tasks-required-task-error tasks-mrtr-composition)
fi
if [ ! -d node_modules/@modelcontextprotocol/conformance ]; then
  npm ci --no-audit --no-fund --loglevel=error >&2 || exit 2
fi
out=results/$label
rm -rf "$out"
mkdir -p "$out"
failed_any=0
for s in "${scenarios[@]}"; do
  # The suite exits 1 when a check fails; the counts below say which.
  node --import ./node20-register.mjs node_modules/@modelcontextprotocol/conformance/dist/index.js \
    server --url "$url" --scenario "$s" -o "$out/$s" >"$out/$s.log" 2>&1 || true
done
node - "$out" "$label" "${scenarios[@]}" <<'JS' || failed_any=1
const fs = require('node:fs'), path = require('node:path');
const [out, label, ...scenarios] = process.argv.slice(2);
let tp = 0, tf = 0, bad = false;
for (const s of scenarios) {
  const dir = path.join(out, s);
  const runs = fs.existsSync(dir) ? fs.readdirSync(dir).filter((d) => fs.existsSync(path.join(dir, d, 'checks.json'))) : [];
  if (runs.length === 0) {
    console.log(`${label} ${s}: no checks (see ${out}/${s}.log)`);
    bad = true;
    continue;
  }
  const checks = JSON.parse(fs.readFileSync(path.join(dir, runs.sort().pop(), 'checks.json'), 'utf8'));
  const n = (st) => checks.filter((c) => c.status === st).length;
  const p = n('SUCCESS'), f = n('FAILURE'), other = checks.length - p - f;
  tp += p; tf += f;
  if (f > 0) bad = true;
  const failedIds = checks.filter((c) => c.status === 'FAILURE').map((c) => c.id);
  console.log(`${label} ${s}: ${p} passed, ${f} failed` + (other ? `, ${other} other (${[...new Set(checks.filter((c) => c.status !== 'SUCCESS' && c.status !== 'FAILURE').map((c) => c.status))].join('/')})` : '') +
    (failedIds.length ? ` [failed: ${failedIds.join(', ')}]` : ''));
}
console.log(`${label} total: ${tp} passed, ${tf} failed`);
process.exit(bad ? 1 : 0);
JS
exit $failed_any
