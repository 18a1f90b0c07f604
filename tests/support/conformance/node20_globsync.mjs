// The conformance suite imports `globSync` from `fs`, which Node gained in 22. On an older Node this
// hook hands the suite's modules an `fs` with the npm `glob` package's `globSync` added; on Node 22
// and later it changes nothing. Loaded with `node --import ./node20_globsync.mjs`.
import { register } from "node:module";
import * as fs from "node:fs";

if (typeof fs.globSync !== "function") {
  register("./node20_globsync_hooks.mjs", import.meta.url);
}
