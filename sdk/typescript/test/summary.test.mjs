// Summaries: what listSessionSummaries returns is the SDK's own fold of
// every batch, in commit order, even with several writers at once.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";

import { foldSessionSummary } from "@anthropic-ai/claude-agent-sdk";

import { SessiondStore } from "../dist/index.js";
import { assistantEntry, call, rawClient, startDaemon, userEntry, uuid } from "./helpers.mjs";

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

const project = () => `-tmp-summary-${randomBytes(4).toString("hex")}`;

async function summaryOf(s, key) {
  const list = await s.listSessionSummaries(key.projectKey);
  return list.find((x) => x.sessionId === key.sessionId);
}

describe("summaries", () => {
  test("titles, tags, prompts and branch fold as the SDK folds them", async () => {
    const key = { projectKey: project(), sessionId: uuid() };
    const sid = key.sessionId;
    const batches = [
      [userEntry(sid, "<command-name>/init</command-name>"), userEntry(sid, "the real first prompt")],
      [{ type: "ai-title", aiTitle: "An AI title", sessionId: sid }, { type: "tag", tag: "wip", sessionId: sid }],
      [{ type: "last-prompt", lastPrompt: "latest", sessionId: sid }, { type: "custom-title", customTitle: "Mine", sessionId: sid }],
      [{ type: "tag", tag: "", sessionId: sid }, userEntry(sid, "on another branch", { gitBranch: "feature" })],
    ];
    let want;
    for (const b of batches) {
      await store.append(key, b);
      want = foldSessionSummary(want, key, b);
      assert.deepEqual((await summaryOf(store, key)).data, want.data);
    }
    assert.equal(want.data.tag, undefined);
    assert.equal(want.data.customTitle, "Mine");
  });

  test("a session written without summaries gets one that covers all its entries", async () => {
    const key = { projectKey: project(), sessionId: uuid() };
    const sid = key.sessionId;
    // Written before (sessionctl, the CLI, an older adapter): no summary.
    const early = [userEntry(sid, "the very first prompt", { timestamp: "2026-01-02T03:04:05.000Z" }), { type: "custom-title", customTitle: "Early", sessionId: sid }];
    const client = rawClient(daemon.socket);
    try {
      await call(client, "append", { session: { projectKey: key.projectKey, sessionId: sid, subpath: "" }, entries: early.map((e) => Buffer.from(JSON.stringify(e))), batchId: "", summary: undefined, agentConfigDir: "", entriesText: [] });
    } finally {
      client.close();
    }
    assert.equal(await summaryOf(store, key), undefined);
    const later = [userEntry(sid, "a later prompt")];
    await store.append(key, later);
    const got = await summaryOf(store, key);
    assert.deepEqual(got.data, foldSessionSummary(undefined, key, [...early, ...later]).data);
    assert.equal(got.data.firstPrompt, "the very first prompt");
    assert.equal(got.data.createdAt, Date.parse("2026-01-02T03:04:05.000Z"));
  });

  test("two stores (two processes) appending to one session never lose a fold", async () => {
    const key = { projectKey: project(), sessionId: uuid() };
    const sid = key.sessionId;
    const a = new SessiondStore({ socketPath: daemon.socket });
    const b = new SessiondStore({ socketPath: daemon.socket });
    try {
      await a.append(key, [userEntry(sid, "start")]);
      const writer = async (s, name) => {
        let parent = null;
        for (let i = 0; i < 25; i++) {
          const u = userEntry(sid, `${name} prompt ${i}`, { parentUuid: parent });
          const r = assistantEntry(sid, u.uuid, `${name} answer ${i}`);
          parent = r.uuid;
          const batch = [u, r, { type: "last-prompt", lastPrompt: `${name} ${i}`, sessionId: sid }];
          if (i % 5 === 0) batch.push({ type: "custom-title", customTitle: `${name} title ${i}`, sessionId: sid });
          if (i % 7 === 0) batch.push({ type: "tag", tag: `${name}-${i}`, sessionId: sid });
          await s.append(key, batch);
        }
      };
      await Promise.all([writer(a, "A"), writer(b, "B")]);
      const stored = await a.load(key);
      assert.equal(stored.length, 1 + 2 * 25 * 3 + 2 * 5 + 2 * 4);
      // Folding every entry in commit (stored) order gives the stored summary.
      const want = foldSessionSummary(undefined, key, stored).data;
      assert.deepEqual((await summaryOf(a, key)).data, want);
      assert.deepEqual((await summaryOf(b, key)).data, want);
      // Both writers' last batches are in it: the last-prompt is the last one stored.
      const lastPrompt = stored.filter((e) => e.type === "last-prompt").at(-1).lastPrompt;
      assert.equal(want.lastPrompt, lastPrompt);
    } finally {
      a.close();
      b.close();
    }
  });

  test("a key with the session id in upper case folds onto the summary stored under lower case", async () => {
    // sessiond stores a session under its lower-case id: one UUID is one session in any case.
    const lower = { projectKey: project(), sessionId: uuid() };
    const upper = { projectKey: lower.projectKey, sessionId: lower.sessionId.toUpperCase() };
    const a = new SessiondStore({ socketPath: daemon.socket });
    const b = new SessiondStore({ socketPath: daemon.socket });
    try {
      const first = [userEntry(lower.sessionId, "first prompt"), { type: "custom-title", customTitle: "Kept", sessionId: lower.sessionId }];
      await a.append(lower, first);
      const later = [userEntry(lower.sessionId, "later prompt")];
      await b.append(upper, later);
      assert.equal((await a.load(lower)).length, 3);
      assert.equal((await b.load(upper)).length, 3);
      const got = await summaryOf(a, lower);
      assert.deepEqual(got.data, foldSessionSummary(undefined, lower, [...first, ...later]).data);
    } finally {
      a.close();
      b.close();
    }
  });

  test("the summary's mtime is the listing's and the SDK lists the session from it", async () => {
    const { listSessions } = await import("@anthropic-ai/claude-agent-sdk");
    // The SDK derives the project key from a directory.
    const { mkdtempSync, realpathSync } = await import("node:fs");
    const dir = realpathSync(mkdtempSync("/tmp/sdk-list-"));
    const projectKey = dir.replace(/[^A-Za-z0-9]/g, "-");
    const key = { projectKey, sessionId: uuid() };
    await store.append(key, [userEntry(key.sessionId, "listed prompt", { cwd: dir }), { type: "custom-title", customTitle: "Listed", sessionId: key.sessionId }]);
    const sums = await store.listSessionSummaries(projectKey);
    const list = await store.listSessions(projectKey);
    assert.equal(sums[0].mtime, list[0].mtime);
    const sdk = await listSessions({ dir, sessionStore: store });
    assert.equal(sdk.length, 1);
    assert.equal(sdk[0].sessionId, key.sessionId);
    assert.equal(sdk[0].summary, "Listed");
    assert.equal(sdk[0].firstPrompt, "listed prompt");
    assert.equal(sdk[0].lastModified, list[0].mtime);
  });

  test("an append without summary (sessionctl rename, another client) leaves no summary the SDK takes as fresh", async () => {
    const { listSessions } = await import("@anthropic-ai/claude-agent-sdk");
    const { mkdtempSync, realpathSync } = await import("node:fs");
    const dir = realpathSync(mkdtempSync("/tmp/sdk-stale-"));
    const projectKey = dir.replace(/[^A-Za-z0-9]/g, "-");
    const key = { projectKey, sessionId: uuid() };
    const ref = { projectKey, sessionId: key.sessionId, subpath: "" };
    await store.append(key, [userEntry(key.sessionId, "a prompt", { cwd: dir }), { type: "custom-title", customTitle: "Before", sessionId: key.sessionId }]);
    const client = rawClient(daemon.socket);
    try {
      await new Promise((r) => setTimeout(r, 5));
      await call(client, "rename", { session: ref, title: "Renamed" });
      assert.equal((await listSessions({ dir, sessionStore: store }))[0].summary, "Renamed");
      await new Promise((r) => setTimeout(r, 5));
      const title = { type: "custom-title", customTitle: "Raw", sessionId: key.sessionId };
      await call(client, "append", { session: ref, entries: [Buffer.from(JSON.stringify(title))], batchId: "", summary: undefined, agentConfigDir: "", entriesText: [] });
      assert.equal((await listSessions({ dir, sessionStore: store }))[0].summary, "Raw");
    } finally {
      client.close();
    }
    // The store sees from the entry count of its next append that lines
    // came in without a summary, and the append after that folds every
    // entry again: the SDK then lists the last title.
    await store.append(key, [{ type: "tag", tag: "t", sessionId: key.sessionId }]);
    await store.append(key, [{ type: "last-prompt", lastPrompt: "lp", sessionId: key.sessionId }]);
    const got = await summaryOf(store, key);
    assert.deepEqual(got.data, foldSessionSummary(undefined, key, await store.load(key)).data);
    assert.equal(got.data.tag, "t");
    assert.equal((await listSessions({ dir, sessionStore: store }))[0].summary, "Raw");
  });

  test(
    "the first store append after lines appended without summary stores a summary covering them",
    async () => {
      const key = { projectKey: project(), sessionId: uuid() };
      const ref = { projectKey: key.projectKey, sessionId: key.sessionId, subpath: "" };
      await store.append(key, [userEntry(key.sessionId, "a prompt"), { type: "custom-title", customTitle: "Before", sessionId: key.sessionId }]);
      const client = rawClient(daemon.socket);
      try {
        await call(client, "rename", { session: ref, title: "Renamed" });
      } finally {
        client.close();
      }
      await store.append(key, [{ type: "tag", tag: "t", sessionId: key.sessionId }]);
      assert.equal((await summaryOf(store, key)).data.customTitle, "Renamed");
    },
  );

  test("when the summary cannot be folded the batch still goes, and the next one rebuilds the summary", async () => {
    const s = new SessiondStore({ socketPath: daemon.socket });
    try {
      const key = { projectKey: project(), sessionId: uuid() };
      const first = [userEntry(key.sessionId, "first prompt")];
      await s.append(key, first);
      // The base of the next fold cannot be read (say, a load past its
      // deadline): the batch is stored without a summary.
      s.summaries.clear();
      const real = s.baseSummary;
      s.baseSummary = async () => {
        throw new Error("simulated: cannot read the base");
      };
      const second = [{ type: "custom-title", customTitle: "Second", sessionId: key.sessionId }];
      await s.append(key, second);
      s.baseSummary = real;
      assert.deepEqual(await s.load(key), [...first, ...second]);
      const third = [{ type: "tag", tag: "third", sessionId: key.sessionId }];
      await s.append(key, third);
      assert.deepEqual((await summaryOf(s, key)).data, foldSessionSummary(undefined, key, [...first, ...second, ...third]).data);
    } finally {
      s.close();
    }
  });

  test("a summary over 32 KiB is shortened, not refused", async () => {
    const key = { projectKey: project(), sessionId: uuid() };
    const huge = "t".repeat(50_000);
    const batch = [userEntry(key.sessionId, "prompt"), { type: "custom-title", customTitle: huge, sessionId: key.sessionId }];
    await store.append(key, batch);
    assert.deepEqual(await store.load(key), batch);
    const got = await summaryOf(store, key);
    assert.ok(got.data.customTitle.startsWith("tttt"));
    assert.ok(Buffer.byteLength(JSON.stringify(got.data)) <= 32 * 1024);
  });

  test("Python-format summaries are left to the SDK's own fallback", async () => {
    // Not produced here: checked through the adapter's filter only when the
    // daemon holds one. A summary whose data carries the Python fold's
    // snake_case keys is skipped by listSessionSummaries.
    const key = { projectKey: project(), sessionId: uuid() };
    const client = rawClient(daemon.socket);
    try {
      const py = Buffer.from(JSON.stringify({ is_sidechain: false, first_prompt: "from python", first_prompt_locked: true }));
      await call(client, "append", {
        session: { projectKey: key.projectKey, sessionId: key.sessionId, subpath: "" },
        entries: [Buffer.from(JSON.stringify(userEntry(key.sessionId, "from python")))],
        batchId: uuid(),
        summary: { data: py, expectedVersion: 0, coversEntries: 0, checkCoverage: false },
        agentConfigDir: "",
        entriesText: [],
      });
    } finally {
      client.close();
    }
    assert.equal(await summaryOf(store, key), undefined);
    // Appending through the TypeScript adapter replaces it with its own fold.
    const more = [userEntry(key.sessionId, "from typescript")];
    await store.append(key, more);
    const got = await summaryOf(store, key);
    assert.equal(got.data.firstPrompt, "from python");
    assert.equal(got.data.isSidechain, false);
  });
});
