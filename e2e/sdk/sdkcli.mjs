#!/usr/bin/env node
// sdkcli runs one session function of the official Claude Agent SDK
// (@anthropic-ai/claude-agent-sdk, pinned in package.json) so that sessiond's
// Go tests can ask the real reader what it sees in a CLAUDE_CONFIG_DIR.
//
// Protocol: ONE JSON request on stdin, ONE JSON response on stdout.
//
//   request:  {"op": "<name>", ...arguments}
//   response: {"result": <what the SDK returned, undefined as null>}
//          or {"error": "<message>", "errorName": "<Error class>", "kind": "sdk"}
//             when the SDK function threw (exit status 0, so a test can
//             assert on the SDK's own errors),
//          or {"error": "<message>", "kind": "request"} when the request
//             itself is unusable (bad JSON, unknown op or argument, missing
//             CLAUDE_CONFIG_DIR): a bug in the caller, still exit status 0.
//
// The SDK reads CLAUDE_CONFIG_DIR on every call; this script refuses to run
// without it so that a test can never read or write the real ~/.claude.
// Ops and their arguments are listed in OPS below (run with op "ops").

import * as sdk from '@anthropic-ai/claude-agent-sdk';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const str = (v) => typeof v === 'string';
const optStr = (v) => v === undefined || typeof v === 'string';
const optInt = (v) => v === undefined || (Number.isInteger(v) && v >= 0);
const optBool = (v) => v === undefined || typeof v === 'boolean';

// Each op: the arguments it accepts (name -> validator; every key not listed
// is refused so that a typo in a Go wrapper fails loudly instead of being
// ignored) and how it calls the SDK. Options whose value is undefined are
// dropped, so the SDK applies its own defaults.
const OPS = {
  // listSessions(options?: {dir?, limit?, offset?, includeWorktrees?, includeProgrammatic?}): Promise<SDKSessionInfo[]>
  listSessions: {
    args: { dir: optStr, limit: optInt, offset: optInt, includeWorktrees: optBool, includeProgrammatic: optBool },
    run: (a) => sdk.listSessions(opts(a, 'dir', 'limit', 'offset', 'includeWorktrees', 'includeProgrammatic')),
  },
  // getSessionInfo(sessionId, options?: {dir?}): Promise<SDKSessionInfo | undefined>
  getSessionInfo: {
    args: { sessionId: str, dir: optStr },
    run: (a) => sdk.getSessionInfo(a.sessionId, opts(a, 'dir')),
  },
  // getSessionMessages(sessionId, options?: {dir?, limit?, offset?, includeSystemMessages?}): Promise<SessionMessage[]>
  getSessionMessages: {
    args: { sessionId: str, dir: optStr, limit: optInt, offset: optInt, includeSystemMessages: optBool },
    run: (a) => sdk.getSessionMessages(a.sessionId, opts(a, 'dir', 'limit', 'offset', 'includeSystemMessages')),
  },
  // listSubagents(sessionId, options?: {dir?}): Promise<string[]>
  listSubagents: {
    args: { sessionId: str, dir: optStr },
    run: (a) => sdk.listSubagents(a.sessionId, opts(a, 'dir')),
  },
  // getSubagentMessages(sessionId, agentId, options?: {dir?, limit?, offset?}): Promise<SessionMessage[]>
  getSubagentMessages: {
    args: { sessionId: str, agentId: str, dir: optStr, limit: optInt, offset: optInt },
    run: (a) => sdk.getSubagentMessages(a.sessionId, a.agentId, opts(a, 'dir', 'limit', 'offset')),
  },
  // forkSession(sessionId, options?: {dir?, upToMessageId?, title?}): Promise<{sessionId}>
  forkSession: {
    args: { sessionId: str, dir: optStr, upToMessageId: optStr, title: optStr },
    run: (a) => sdk.forkSession(a.sessionId, opts(a, 'dir', 'upToMessageId', 'title')),
  },
  // renameSession(sessionId, title, options?: {dir?}): Promise<void>
  renameSession: {
    args: { sessionId: str, title: str, dir: optStr },
    run: (a) => sdk.renameSession(a.sessionId, a.title, opts(a, 'dir')),
  },
  // tagSession(sessionId, tag: string | null, options?: {dir?}): Promise<void>
  tagSession: {
    args: { sessionId: str, tag: (v) => v === null || typeof v === 'string', dir: optStr },
    required: ['tag'],
    run: (a) => sdk.tagSession(a.sessionId, a.tag, opts(a, 'dir')),
  },
  // deleteSession(sessionId, options?: {dir?}): Promise<void>
  deleteSession: {
    args: { sessionId: str, dir: optStr },
    run: (a) => sdk.deleteSession(a.sessionId, opts(a, 'dir')),
  },
  // archiveSession(sessionId, options?: {dir?}): Promise<void>
  archiveSession: {
    args: { sessionId: str, dir: optStr },
    run: (a) => sdk.archiveSession(a.sessionId, opts(a, 'dir')),
  },
  // unarchiveSession(sessionId, options?: {dir?}): Promise<void>
  unarchiveSession: {
    args: { sessionId: str, dir: optStr },
    run: (a) => sdk.unarchiveSession(a.sessionId, opts(a, 'dir')),
  },
  // importSessionToStore(sessionId, store, options?: {dir?, includeSubagents?, batchSize?}): Promise<void>
  // The store is the SDK's own InMemorySessionStore; the result is every key
  // it received with the entries appended under it, in the order written:
  // exactly what the SDK would mirror from these files to a SessionStore.
  importSessionToStore: {
    args: { sessionId: str, dir: optStr, includeSubagents: optBool, batchSize: optInt },
    run: async (a) => {
      const store = new RecordingStore();
      await sdk.importSessionToStore(a.sessionId, store, opts(a, 'dir', 'includeSubagents', 'batchSize'));
      return store.dump();
    },
  },
  // version: the SDK's package version and its exported names, to check what
  // is installed.
  version: {
    args: {},
    run: () => {
      // The package's "exports" hide its package.json; read it beside the entry point.
      const entry = createRequire(import.meta.url).resolve('@anthropic-ai/claude-agent-sdk');
      const pkg = JSON.parse(readFileSync(join(dirname(entry), 'package.json'), 'utf8'));
      return { version: pkg.version, node: process.versions.node, exports: Object.keys(sdk).sort() };
    },
  },
  // ops: what this script accepts.
  ops: {
    args: {},
    run: () => Object.fromEntries(Object.entries(OPS).map(([k, v]) => [k, Object.keys(v.args)])),
  },
};

function opts(a, ...names) {
  const o = {};
  for (const n of names) if (a[n] !== undefined) o[n] = a[n];
  return o;
}

// RecordingStore is the SDK's InMemorySessionStore, also remembering the keys
// in the order they were first appended to.
class RecordingStore extends sdk.InMemorySessionStore {
  #keys = new Map();
  async append(key, entries) {
    const id = JSON.stringify([key.projectKey, key.sessionId, key.subpath ?? null]);
    if (!this.#keys.has(id)) this.#keys.set(id, key);
    return super.append(key, entries);
  }
  dump() {
    return [...this.#keys.values()].map((key) => ({
      key: { projectKey: key.projectKey, sessionId: key.sessionId, ...(key.subpath !== undefined && { subpath: key.subpath }) },
      entries: this.getEntries(key),
    }));
  }
}

class RequestError extends Error {}

function parseRequest(text) {
  let req;
  try {
    req = JSON.parse(text);
  } catch (e) {
    throw new RequestError(`request is not JSON: ${e.message}`);
  }
  if (typeof req !== 'object' || req === null || Array.isArray(req)) {
    throw new RequestError('request must be a JSON object {"op": ..., ...}');
  }
  const { op, ...args } = req;
  const spec = Object.hasOwn(OPS, op) ? OPS[op] : undefined;
  if (!spec) throw new RequestError(`unknown op ${JSON.stringify(op)}; known: ${Object.keys(OPS).join(', ')}`);
  for (const [k, v] of Object.entries(args)) {
    if (!Object.hasOwn(spec.args, k)) throw new RequestError(`${op}: unknown argument ${JSON.stringify(k)}; accepted: ${Object.keys(spec.args).join(', ') || 'none'}`);
    if (!spec.args[k](v)) throw new RequestError(`${op}: bad value for ${k}: ${JSON.stringify(v)}`);
  }
  for (const [k, check] of Object.entries(spec.args)) {
    // A plain string check means the argument is required.
    if ((check === str || spec.required?.includes(k)) && !Object.hasOwn(args, k)) {
      throw new RequestError(`${op}: missing argument ${JSON.stringify(k)}`);
    }
  }
  return { spec, args };
}

function respond(obj) {
  // Fields the SDK left undefined are omitted, as JSON.stringify does.
  const text = JSON.stringify(obj) + '\n';
  process.stdout.write(text, () => process.exit(0));
}

async function main() {
  // Anything the SDK prints must not mix with the one response on stdout.
  for (const m of ['log', 'info', 'debug', 'warn']) console[m] = (...a) => console.error(...a);

  let request;
  try {
    request = parseRequest(readFileSync(0, 'utf8'));
    if (!process.env.CLAUDE_CONFIG_DIR) {
      throw new RequestError('CLAUDE_CONFIG_DIR is not set: refusing to touch the real ~/.claude');
    }
  } catch (e) {
    respond({ error: e.message, kind: 'request' });
    return;
  }
  let result;
  try {
    result = await request.spec.run(request.args);
  } catch (e) {
    respond({ error: e?.message ?? String(e), errorName: e?.name ?? typeof e, kind: 'sdk' });
    return;
  }
  respond({ result: result === undefined ? null : result });
}

main().catch((e) => {
  // A bug in this script: say so on stderr and fail.
  console.error(e);
  process.exit(2);
});
