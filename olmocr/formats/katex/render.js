// Renders TeX to MathML with KaTeX for olmocr.bench math tests.
// Protocol: one JSON string (the TeX) per stdin line; one JSON object per stdout line, in order:
// {"mathml": "..."} or {"error": "..."}. A long-lived process, so KaTeX loads once per worker.
"use strict";
const readline = require("readline");
let katex;
try {
  katex = require("katex");
} catch (err) {
  process.stderr.write("KaTeX is not installed next to render.js: run 'npm ci --prefix " + __dirname + "'\n");
  process.exit(3);
}
const options = { output: "mathml", displayMode: true, throwOnError: true, strict: "ignore", trust: false };
const lines = readline.createInterface({ input: process.stdin, terminal: false });
lines.on("line", (line) => {
  let reply;
  try {
    reply = { mathml: katex.renderToString(JSON.parse(line), options) };
  } catch (err) {
    reply = { error: String(err && err.message ? err.message : err) };
  }
  process.stdout.write(JSON.stringify(reply) + "\n");
});
