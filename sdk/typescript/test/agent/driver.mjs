// driver.mjs runs the official Agent SDK for sessiond's end-to-end tests
// (e2e/agent_test.go): real agent turns through query() with a
// SessiondStore, and the SDK's session functions with and without the
// store. It takes one JSON argument and prints one JSON line per event, so
// the Go test decides what is right.
//
//   {"op":"turn", "socket", "cwd", "configDir", "home", "baseURL", "prompt",
//    "resume"?, "flush"?: "batched"|"eager"|"none"}
//     configDir "": on defaults (no CLAUDE_CONFIG_DIR; ~/.claude under home).
//     With "reportAppends", also {"appended": {subpath, entries}} for each
//     batch the SDK mirrors, before it is sent.
//     prints {"msg": {type, subtype, session_id, is_error}} for each message,
//     then {"end": {"session_id", "error"?}}. flush "none" runs without a
//     store: the CLI reads and writes its config dir alone (a resume finds
//     the session there, as in a folder sessionctl materialize wrote).
//   {"op":"functions", "socket", "root", "cwd", "sessionId"}
//     prints {"store": {...}, "disk": {...}}: what listSessions,
//     getSessionInfo, getSessionMessages, listSubagents and
//     getSubagentMessages return with { sessionStore } and reading the files
//     sessiond wrote under root.
import {
  query, listSessions, getSessionInfo, getSessionMessages, listSubagents, getSubagentMessages,
} from '@anthropic-ai/claude-agent-sdk';
import { SessiondStore } from '../../dist/index.js';

const cfg = JSON.parse(process.argv[2]);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');

async function turn() {
  // The agent's config dir is where its CLI writes local copies: the store
  // tells sessiond. With no configDir the driver runs on defaults, as an
  // agent with only the README's three lines: no CLAUDE_CONFIG_DIR at all
  // (the Go test unsets it and sets HOME for this process too), so the CLI
  // and the store both take ~/.claude.
  const defaults = !cfg.configDir;
  const store = cfg.flush === 'none' ? null
    : defaults ? new SessiondStore({ socketPath: cfg.socket })
    : new SessiondStore({ socketPath: cfg.socket, agentConfigDir: cfg.configDir });
  if (store && cfg.reportAppends) {
    // What the SDK mirrors, for the test to compare with the transcript.
    const append = store.append.bind(store);
    store.append = (key, entries) => {
      out({ appended: { subpath: key.subpath ?? '', entries } });
      return append(key, entries);
    };
  }
  const env = {
    ...process.env,
    ANTHROPIC_BASE_URL: cfg.baseURL,
    ANTHROPIC_API_KEY: 'sk-test',
    ...(defaults ? {} : { CLAUDE_CONFIG_DIR: cfg.configDir }),
    HOME: cfg.home,
    CLAUDE_CODE_TMPDIR: cfg.home,
    DISABLE_TELEMETRY: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
  };
  let sessionId = cfg.resume ?? '';
  try {
    const q = query({
      prompt: cfg.prompt,
      options: {
        cwd: cfg.cwd,
        env,
        allowedTools: ['Bash', 'Agent', 'Task'],
        ...(store ? { sessionStore: store, sessionStoreFlush: cfg.flush ?? 'batched' } : {}),
        ...(cfg.resume ? { resume: cfg.resume } : {}),
      },
    });
    for await (const m of q) {
      if (m.session_id) sessionId = m.session_id;
      out({ msg: { type: m.type, subtype: m.subtype ?? '', session_id: m.session_id ?? '', is_error: m.is_error ?? false, error: m.error ?? '' } });
    }
    out({ end: { session_id: sessionId } });
  } catch (e) {
    out({ end: { session_id: sessionId, error: String(e?.message ?? e) } });
  } finally {
    store?.close();
  }
}

async function functions() {
  const store = new SessiondStore({ socketPath: cfg.socket });
  const collect = async (opts) => {
    const r = {};
    r.listSessions = await listSessions({ dir: cfg.cwd, ...opts });
    r.info = await getSessionInfo(cfg.sessionId, { dir: cfg.cwd, ...opts });
    r.messages = await getSessionMessages(cfg.sessionId, { dir: cfg.cwd, ...opts });
    r.subagents = (await listSubagents(cfg.sessionId, { dir: cfg.cwd, ...opts })).sort();
    r.subagentMessages = {};
    for (const a of r.subagents) {
      r.subagentMessages[a] = await getSubagentMessages(cfg.sessionId, a, { dir: cfg.cwd, ...opts });
    }
    return r;
  };
  process.env.CLAUDE_CONFIG_DIR = cfg.root;
  try {
    out({ store: await collect({ sessionStore: store }), disk: await collect({}) });
  } finally {
    store.close();
  }
}

await (cfg.op === 'turn' ? turn() : functions());
