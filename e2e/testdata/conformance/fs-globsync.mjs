// node:fs plus globSync(pattern, {cwd}) for the patterns the conformance
// suite uses: "**/<name>" (any depth) and plain relative paths. Returns
// paths relative to cwd, like fs.globSync of Node 22.
import fs from 'node:fs';
import path from 'node:path';

export * from 'node:fs';
export default fs;

export function globSync(pattern, options = {}) {
  const cwd = options.cwd ?? process.cwd();
  const out = [];
  if (!pattern.startsWith('**/')) {
    return fs.existsSync(path.join(cwd, pattern)) ? [pattern] : [];
  }
  const name = pattern.slice(3);
  const walk = (rel) => {
    let entries;
    try {
      entries = fs.readdirSync(path.join(cwd, rel), { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      const p = rel ? path.join(rel, e.name) : e.name;
      if (e.isDirectory()) walk(p);
      else if (e.name === name) out.push(p);
    }
  };
  walk('');
  return out;
}
