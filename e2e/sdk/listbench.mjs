#!/usr/bin/env node
// listbench times the official Claude Agent SDK's listSessions() for
// sessiond's listing benchmark (internal/bench/listing.go).
//
// Unlike sdkcli.mjs, which runs one call per process, this script calls
// listSessions() several times in one process so that the figure compared
// with sessiond is the call itself: node's start-up and the SDK's import are
// measured apart (importMs) instead of being charged to the listing.
//
// Protocol: ONE JSON request on stdin, ONE JSON response on stdout.
//
//   request:  {"reps": <calls, >= 1>}
//   response: {"node": <version>, "sdk": <package version>,
//              "importMs": <process start until the SDK was imported>,
//              "timesMs": [<one per call, in order>],
//              "result": <what the last call returned>}
//          or {"error": "<message>"}
//
// listSessions() is called without options (every project under
// CLAUDE_CONFIG_DIR/projects), which this script refuses to run without so
// that it can never read the real ~/.claude.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';

// performance.now() counts from the process's time origin, i.e. its start.
const sdk = await import('@anthropic-ai/claude-agent-sdk');
const importMs = performance.now();

function respond(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n', () => process.exit(0));
}

function sdkVersion() {
  // The package's "exports" hide its package.json; read it beside the entry point.
  const entry = createRequire(import.meta.url).resolve('@anthropic-ai/claude-agent-sdk');
  return JSON.parse(readFileSync(join(dirname(entry), 'package.json'), 'utf8')).version;
}

async function main() {
  // Anything the SDK prints must not mix with the one response on stdout.
  for (const m of ['log', 'info', 'debug', 'warn']) console[m] = (...a) => console.error(...a);
  let req;
  try {
    req = JSON.parse(readFileSync(0, 'utf8'));
  } catch (e) {
    respond({ error: `request is not JSON: ${e.message}` });
    return;
  }
  const reps = req?.reps;
  if (!Number.isInteger(reps) || reps < 1) {
    respond({ error: `reps must be an integer >= 1, got ${JSON.stringify(reps)}` });
    return;
  }
  if (!process.env.CLAUDE_CONFIG_DIR) {
    respond({ error: 'CLAUDE_CONFIG_DIR is not set: refusing to read the real ~/.claude' });
    return;
  }
  const timesMs = [];
  let result;
  for (let i = 0; i < reps; i++) {
    // One call at a time, so that each figure is one whole listing; the
    // first is reported too (the Go side shows it apart from the best), so
    // any caching or JIT warm-up across calls is visible.
    const t = performance.now();
    result = await sdk.listSessions();
    timesMs.push(performance.now() - t);
  }
  respond({ node: process.versions.node, sdk: sdkVersion(), importMs, timesMs, result });
}

main().catch((e) => {
  respond({ error: e?.stack ?? String(e) });
});
