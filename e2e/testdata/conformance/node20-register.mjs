// Loaded with `node --import ./node20-register.mjs`: on Node releases
// without fs.globSync (before 22) it hands the modules of
// @modelcontextprotocol/conformance an fs module that adds a small
// globSync, enough for the suite's "**/name" patterns. On newer Node it
// does nothing.
import fs from 'node:fs';
import { register } from 'node:module';

if (typeof fs.globSync !== 'function') {
  register('./node20-hooks.mjs', import.meta.url);
}
