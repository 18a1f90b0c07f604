// Node's `fs`, plus `globSync` from the npm `glob` package (see node20_globsync.mjs).
export * from "node:fs";
export { default } from "node:fs";
export { globSync } from "glob";
