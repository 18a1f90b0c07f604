// Module hooks (see node20_globsync.mjs): `fs` as the conformance suite's modules see it, and the
// npm `glob` package resolved from where the suite is installed.
const withGlob = new URL("./node20_fs_with_glob.mjs", import.meta.url).href;
let suiteModule = null;

export async function resolve(specifier, context, next) {
  const parent = context.parentURL || "";
  if (parent.includes("/@modelcontextprotocol/conformance/") && (specifier === "fs" || specifier === "node:fs")) {
    suiteModule = parent;
    return { url: withGlob, shortCircuit: true };
  }
  if (specifier === "glob" && parent === withGlob && suiteModule) {
    return next(specifier, { ...context, parentURL: suiteModule });
  }
  return next(specifier, context);
}
