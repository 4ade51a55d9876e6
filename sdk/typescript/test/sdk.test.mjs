// The SDK's own session functions, given a SessiondStore, against a real
// sessiond (no model, no CLI: these run in the SDK process).

import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, realpathSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  deleteSession,
  forkSession,
  getSessionInfo,
  getSessionMessages,
  getSubagentMessages,
  importSessionToStore,
  listSessions,
  listSubagents,
  renameSession,
  tagSession,
} from "@anthropic-ai/claude-agent-sdk";

import { SessiondStore } from "../dist/index.js";
import { assistantEntry, startDaemon, tempDir, userEntry, uuid } from "./helpers.mjs";

let daemon;
let store;

before(async () => {
  daemon = await startDaemon();
  store = new SessiondStore({ socketPath: daemon.socket });
});

after(async () => {
  store?.close();
  await daemon?.stop();
});

// A working directory and the project key the SDK derives from it.
function project() {
  const dir = realpathSync(mkdtempSync("/tmp/sdk-fn-"));
  return { dir, projectKey: dir.replace(/[^A-Za-z0-9]/g, "-") };
}

function conversation(sid, dir, n = 2) {
  const out = [];
  let parent = null;
  for (let i = 0; i < n; i++) {
    const u = userEntry(sid, `question ${i}`, { parentUuid: parent, cwd: dir });
    const a = assistantEntry(sid, u.uuid, `answer ${i}`);
    a.cwd = dir;
    parent = a.uuid;
    out.push(u, a);
  }
  return out;
}

describe("the SDK's session functions over SessiondStore", () => {
  test("list, info, messages, rename, tag, fork, delete", async () => {
    const { dir, projectKey } = project();
    const sid = uuid();
    const entries = conversation(sid, dir);
    await store.append({ projectKey, sessionId: sid }, entries);
    const opts = { dir, sessionStore: store };

    let list = await listSessions(opts);
    assert.deepEqual(list.map((s) => [s.sessionId, s.summary]), [[sid, "question 0"]]);
    const info = await getSessionInfo(sid, opts);
    assert.equal(info.firstPrompt, "question 0");
    const msgs = await getSessionMessages(sid, opts);
    assert.deepEqual(msgs.map((m) => m.uuid), entries.map((e) => e.uuid));

    await renameSession(sid, "Renamed", opts);
    await tagSession(sid, "wip", opts);
    list = await listSessions(opts);
    assert.equal(list[0].summary, "Renamed");
    assert.equal(list[0].tag, "wip");
    await tagSession(sid, null, opts);
    assert.equal((await listSessions(opts))[0].tag, undefined);

    const fork = await forkSession(sid, opts);
    assert.notEqual(fork.sessionId, sid);
    list = await listSessions(opts);
    assert.deepEqual(new Set(list.map((s) => s.sessionId)), new Set([sid, fork.sessionId]));
    assert.equal(list.find((s) => s.sessionId === fork.sessionId).summary, "Renamed (fork)");
    assert.equal((await getSessionMessages(fork.sessionId, opts)).length, entries.length);

    await deleteSession(sid, opts);
    assert.deepEqual((await listSessions(opts)).map((s) => s.sessionId), [fork.sessionId]);
    assert.deepEqual(await getSessionMessages(sid, opts), []);
  });

  test("subagents: listed, read, and deleted with their session", async () => {
    const { dir, projectKey } = project();
    const sid = uuid();
    const key = { projectKey, sessionId: sid };
    await store.append(key, conversation(sid, dir, 1));
    const sub = { ...key, subpath: "subagents/agent-abc123" };
    const side = conversation(sid, dir, 1).map((e) => ({ ...e, isSidechain: true, agentId: "abc123" }));
    await store.append(sub, side);
    await store.append(sub, [{ type: "agent_metadata", agentType: "Explore", toolUseId: "toolu_01" }]);
    const opts = { dir, sessionStore: store };
    assert.deepEqual(await listSubagents(sid, opts), ["abc123"]);
    const msgs = await getSubagentMessages(sid, "abc123", opts);
    assert.deepEqual(msgs.map((m) => m.uuid), side.map((e) => e.uuid));
    assert.equal(msgs[0].parent_tool_use_id, "toolu_01");
    await deleteSession(sid, opts);
    assert.deepEqual(await store.listSubkeys(key), []);
    assert.equal(await store.load(sub), null);
  });

  test("importSessionToStore from a local config dir; a second import adds no entry with a uuid", async () => {
    const { dir, projectKey } = project();
    const sid = uuid();
    const cfg = tempDir("cfg-");
    mkdirSync(join(cfg, "projects", projectKey, sid, "subagents"), { recursive: true });
    const entries = conversation(sid, dir);
    writeFileSync(join(cfg, "projects", projectKey, `${sid}.jsonl`), entries.map((e) => JSON.stringify(e) + "\n").join(""));
    const side = conversation(sid, dir, 1).map((e) => ({ ...e, isSidechain: true }));
    writeFileSync(join(cfg, "projects", projectKey, sid, "subagents", "agent-x1.jsonl"), side.map((e) => JSON.stringify(e) + "\n").join(""));
    writeFileSync(join(cfg, "projects", projectKey, sid, "subagents", "agent-x1.meta.json"), JSON.stringify({ agentType: "Explore" }));
    const saved = process.env.CLAUDE_CONFIG_DIR;
    process.env.CLAUDE_CONFIG_DIR = cfg;
    try {
      await importSessionToStore(sid, store, { dir });
      await importSessionToStore(sid, store, { dir });
    } finally {
      if (saved === undefined) delete process.env.CLAUDE_CONFIG_DIR;
      else process.env.CLAUDE_CONFIG_DIR = saved;
    }
    assert.deepEqual(await store.load({ projectKey, sessionId: sid }), entries);
    const sub = await store.load({ projectKey, sessionId: sid, subpath: "subagents/agent-x1" });
    // The uuid-less agent_metadata line is a new batch each time; the
    // transcript lines, which carry uuids, are stored once.
    assert.deepEqual(sub.filter((e) => e.type !== "agent_metadata"), side);
    assert.equal(sub.filter((e) => e.type === "agent_metadata").length, 2);
  });
});
