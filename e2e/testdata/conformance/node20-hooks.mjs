// Module resolve hook for node20-register.mjs: "fs" and "node:fs" imported
// from @modelcontextprotocol/conformance resolve to fs-globsync.mjs.
const shim = new URL('./fs-globsync.mjs', import.meta.url).href;

export async function resolve(specifier, context, next) {
  if ((specifier === 'fs' || specifier === 'node:fs') &&
      context.parentURL && context.parentURL.includes('/@modelcontextprotocol/conformance/')) {
    return { url: shim, shortCircuit: true };
  }
  return next(specifier, context);
}
