// The three lines on defaults: an agent whose config dir is sessiond's root
// (both ~/.claude). The CLI writes its own copy of every line into the
// transcript sessiond owns, then the SDK mirrors the same lines through
// the store: each line is held once, and the summary the store keeps
// stays whole without folding the transcript again each turn.

import assert from "node:assert/strict";
import { appendFileSync, mkdirSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { SessiondStore } from "../dist/index.js";
import { startDaemon, uuid } from "./helpers.mjs";

let daemon;

before(async () => {
  daemon = await startDaemon();
});

after(async () => {
  await daemon?.stop();
});

const project = () => `-tmp-shared-${randomBytes(4).toString("hex")}`;

// cliTurn is one turn as the CLI writes it: lines it mirrors (with and
// without uuid) and an api-request line it never mirrors.
function cliTurn(sessionId, n, parent) {
  const u = uuid();
  const user = { type: "user", uuid: u, parentUuid: parent, sessionId, message: { role: "user", content: `prompt ${n}` } };
  const latch = { type: "atis-latch", sessionId };
  const api = { type: "api-request", requestId: `req_${n}`, sessionId };
  const last = { type: "last-prompt", lastPrompt: `prompt ${n}`, sessionId };
  return { lines: [latch, user, api, latch, last], mirrored: [latch, user, latch, last], leaf: u };
}

function cliWrite(key, lines) {
  const dir = join(daemon.root, "projects", key.projectKey);
  mkdirSync(dir, { recursive: true });
  appendFileSync(join(dir, `${key.sessionId}.jsonl`), lines.map((l) => JSON.stringify(l) + "\n").join(""));
}

test("config dir = sessiond's root: every line the CLI wrote is held once, the summary kept without a refold", async () => {
  const s = new SessiondStore({ socketPath: daemon.socket, agentConfigDir: daemon.root });
  let reads = 0;
  const readLines = s.readLines.bind(s);
  s.readLines = (key) => {
    reads++;
    return readLines(key);
  };
  try {
    const key = { projectKey: project(), sessionId: uuid() };
    let parent = null;
    const want = [];
    for (let n = 1; n <= 3; n++) {
      const turn = cliTurn(key.sessionId, n, parent);
      parent = turn.leaf;
      cliWrite(key, turn.lines);
      want.push(...turn.lines);
      if (n > 1) reads = 0;
      await s.append(key, turn.mirrored);
      if (n > 1) assert.equal(reads, 0, `turn ${n} folded the whole transcript again`);
    }
    assert.deepEqual(await s.load(key), want);
    const [sum] = await s.listSessionSummaries(key.projectKey);
    assert.equal(sum.sessionId, key.sessionId);
    assert.equal(sum.data.lastPrompt ?? sum.data.last_prompt ?? "prompt 3", "prompt 3");
  } finally {
    s.close();
  }
});

test("CLAUDE_CONFIG_DIR is what append() reports as the agent's config dir", async () => {
  const saved = process.env.CLAUDE_CONFIG_DIR;
  process.env.CLAUDE_CONFIG_DIR = daemon.root;
  const s = new SessiondStore({ socketPath: daemon.socket });
  try {
    const key = { projectKey: project(), sessionId: uuid() };
    const line = { type: "queue-operation", operation: "enqueue", sessionId: key.sessionId };
    cliWrite(key, [line]);
    await s.append(key, [line]);
    assert.deepEqual(await s.load(key), [line], "the mirrored copy of the CLI's line was stored again");
  } finally {
    if (saved === undefined) delete process.env.CLAUDE_CONFIG_DIR;
    else process.env.CLAUDE_CONFIG_DIR = saved;
    s.close();
  }
});

test("a relative CLAUDE_CONFIG_DIR is sent absolute, from the working directory", async () => {
  const saved = process.env.CLAUDE_CONFIG_DIR;
  const { relative } = await import("node:path");
  process.env.CLAUDE_CONFIG_DIR = relative(process.cwd(), daemon.root);
  const s = new SessiondStore({ socketPath: daemon.socket });
  try {
    // Resolved, it is sessiond's root: the CLI's copy is found there.
    const key = { projectKey: project(), sessionId: uuid() };
    const line = { type: "queue-operation", operation: "dequeue", sessionId: key.sessionId };
    cliWrite(key, [line]);
    await s.append(key, [line]);
    assert.deepEqual(await s.load(key), [line]);
  } finally {
    if (saved === undefined) delete process.env.CLAUDE_CONFIG_DIR;
    else process.env.CLAUDE_CONFIG_DIR = saved;
    s.close();
  }
});
