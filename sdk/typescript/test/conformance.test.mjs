// The SessionStore conformance cases of ../../../shared/docs/transcripts.md
// ("Conformance cases (the official suite)"), against a real sessiond.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";

import { foldSessionSummary } from "@anthropic-ai/claude-agent-sdk";

import { SessiondStore } from "../dist/index.js";
import { assistantEntry, startDaemon, userEntry, uuid } from "./helpers.mjs";

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

const project = () => `-tmp-conformance-${randomBytes(4).toString("hex")}`;

// A few entries as the CLI writes them: chained user/assistant lines and a
// metadata line without uuid.
function batch(sessionId, n = 2, tag = "") {
  const out = [];
  let parent = null;
  for (let i = 0; i < n; i++) {
    const e = i % 2 === 0 ? userEntry(sessionId, `prompt ${tag}${i}`, { parentUuid: parent }) : assistantEntry(sessionId, parent, `answer ${tag}${i}`);
    parent = e.uuid;
    out.push(e);
  }
  return out;
}

const sorted = (xs) => [...xs].sort();

describe("SessionStore conformance", () => {
  test("(1) append then load is deep-equal and ordered", async () => {
    const key = { projectKey: project(), sessionId: uuid() };
    const entries = [...batch(key.sessionId, 5), { type: "last-prompt", lastPrompt: "prompt 4", sessionId: key.sessionId }];
    await store.append(key, entries);
    assert.deepEqual(await store.load(key), entries);
  });

  test("(2) an unknown session or an unknown subpath loads null", async () => {
    const key = { projectKey: project(), sessionId: uuid() };
    assert.equal(await store.load(key), null);
    await store.append(key, batch(key.sessionId));
    assert.equal(await store.load({ ...key, subpath: "subagents/agent-nosuch" }), null);
    assert.equal(await store.load({ ...key, sessionId: uuid() }), null);
  });

  test("(3) several appends load concatenated in call order", async () => {
    const key = { projectKey: project(), sessionId: uuid() };
    const a = batch(key.sessionId, 3, "a");
    const b = [{ type: "custom-title", customTitle: "t", sessionId: key.sessionId }];
    const c = batch(key.sessionId, 2, "c");
    await store.append(key, a);
    await store.append(key, b);
    await store.append(key, c);
    assert.deepEqual(await store.load(key), [...a, ...b, ...c]);
    // Not awaited one by one: still call order.
    const d = batch(key.sessionId, 1, "d");
    const e = batch(key.sessionId, 1, "e");
    const f = batch(key.sessionId, 1, "f");
    await Promise.all([store.append(key, d), store.append(key, e), store.append(key, f)]);
    assert.deepEqual(await store.load(key), [...a, ...b, ...c, ...d, ...e, ...f]);
  });

  test("(4) appending [] is a no-op and a fresh key still loads null", async () => {
    const key = { projectKey: project(), sessionId: uuid() };
    await store.append(key, []);
    assert.equal(await store.load(key), null);
    assert.deepEqual(await store.listSessions(key.projectKey), []);
    await store.append({ ...key, subpath: "subagents/agent-x" }, []);
    assert.equal(await store.load({ ...key, subpath: "subagents/agent-x" }), null);
  });

  test("(5) a subpath is stored apart from the main transcript", async () => {
    const key = { projectKey: project(), sessionId: uuid() };
    const sub = { ...key, subpath: "subagents/agent-a1" };
    const main = batch(key.sessionId, 2, "m");
    const side = batch(key.sessionId, 2, "s").map((e) => ({ ...e, isSidechain: true, agentId: "a1" }));
    await store.append(key, main);
    await store.append(sub, side);
    assert.deepEqual(await store.load(key), main);
    assert.deepEqual(await store.load(sub), side);
  });

  test("(6) the same session id under two projects stays separate and each lists it", async () => {
    const sessionId = uuid();
    const p1 = { projectKey: project(), sessionId };
    const p2 = { projectKey: project(), sessionId };
    const e1 = batch(sessionId, 2, "one");
    const e2 = batch(sessionId, 3, "two");
    await store.append(p1, e1);
    await store.append(p2, e2);
    assert.deepEqual(await store.load(p1), e1);
    assert.deepEqual(await store.load(p2), e2);
    assert.deepEqual((await store.listSessions(p1.projectKey)).map((s) => s.sessionId), [sessionId]);
    assert.deepEqual((await store.listSessions(p2.projectKey)).map((s) => s.sessionId), [sessionId]);
  });

  test("(7) listSessions returns exactly the project's ids with epoch-ms mtimes; unknown project: []", async () => {
    const p = project();
    const ids = [uuid(), uuid(), uuid()];
    const before = Date.now();
    for (const id of ids) await store.append({ projectKey: p, sessionId: id }, batch(id, 1));
    await store.append({ projectKey: project(), sessionId: uuid() }, batch(uuid(), 1)); // elsewhere
    const list = await store.listSessions(p);
    assert.deepEqual(sorted(list.map((s) => s.sessionId)), sorted(ids));
    for (const s of list) {
      assert.deepEqual(Object.keys(s).sort(), ["mtime", "sessionId"]);
      assert.ok(Number.isInteger(s.mtime) && s.mtime > 1e12, `mtime ${s.mtime} is epoch ms`);
      assert.ok(s.mtime >= before - 2000 && s.mtime <= Date.now() + 2000, `mtime ${s.mtime} is now`);
    }
    assert.deepEqual(await store.listSessions(project()), []);
  });

  test("(8) sessions with only subpath rows are not listed", async () => {
    const p = project();
    const listed = uuid();
    const subOnly = uuid();
    await store.append({ projectKey: p, sessionId: listed }, batch(listed, 1));
    await store.append({ projectKey: p, sessionId: subOnly, subpath: "subagents/agent-z" }, batch(subOnly, 1));
    assert.deepEqual((await store.listSessions(p)).map((s) => s.sessionId), [listed]);
    assert.deepEqual(await store.listSubkeys({ projectKey: p, sessionId: subOnly }), ["subagents/agent-z"]);
  });

  test("(9) deleting a never-written key does not fail; delete then load is null", async () => {
    const key = { projectKey: project(), sessionId: uuid() };
    await store.delete(key);
    await store.delete({ ...key, subpath: "subagents/agent-none" });
    await store.append(key, batch(key.sessionId, 2));
    await store.delete(key);
    assert.equal(await store.load(key), null);
    assert.deepEqual(await store.listSessions(key.projectKey), []);
    await store.delete(key); // twice
  });

  test("(10) deleting a main key cascades to its subpaths; other sessions and projects survive", async () => {
    const p = project();
    const other = project();
    const sid = uuid();
    const keep = uuid();
    const key = { projectKey: p, sessionId: sid };
    await store.append(key, batch(sid, 2));
    await store.append({ ...key, subpath: "subagents/agent-1" }, batch(sid, 1));
    await store.append({ ...key, subpath: "subagents/workflows/run-1/agent-2" }, batch(sid, 1));
    const kept = batch(keep, 2);
    await store.append({ projectKey: p, sessionId: keep }, kept);
    const keptSub = batch(keep, 1);
    await store.append({ projectKey: p, sessionId: keep, subpath: "subagents/agent-1" }, keptSub);
    const elsewhere = batch(sid, 2);
    await store.append({ projectKey: other, sessionId: sid }, elsewhere);
    await store.append({ projectKey: other, sessionId: sid, subpath: "subagents/agent-1" }, keptSub);

    await store.delete(key);

    assert.equal(await store.load(key), null);
    assert.equal(await store.load({ ...key, subpath: "subagents/agent-1" }), null);
    assert.equal(await store.load({ ...key, subpath: "subagents/workflows/run-1/agent-2" }), null);
    assert.deepEqual(await store.listSubkeys(key), []);
    assert.deepEqual((await store.listSessions(p)).map((s) => s.sessionId), [keep]);
    assert.deepEqual(await store.load({ projectKey: p, sessionId: keep }), kept);
    assert.deepEqual(await store.listSubkeys({ projectKey: p, sessionId: keep }), ["subagents/agent-1"]);
    assert.deepEqual(await store.load({ projectKey: other, sessionId: sid }), elsewhere);
    assert.deepEqual(await store.listSubkeys({ projectKey: other, sessionId: sid }), ["subagents/agent-1"]);
    assert.deepEqual((await store.listSessions(other)).map((s) => s.sessionId), [sid]);
  });

  test("(11) deleting one subpath leaves its siblings and the main transcript", async () => {
    const key = { projectKey: project(), sessionId: uuid() };
    const main = batch(key.sessionId, 2);
    const one = batch(key.sessionId, 1, "one");
    const two = batch(key.sessionId, 1, "two");
    await store.append(key, main);
    await store.append({ ...key, subpath: "subagents/agent-1" }, one);
    await store.append({ ...key, subpath: "subagents/agent-2" }, two);
    await store.delete({ ...key, subpath: "subagents/agent-1" });
    assert.equal(await store.load({ ...key, subpath: "subagents/agent-1" }), null);
    assert.deepEqual(await store.load({ ...key, subpath: "subagents/agent-2" }), two);
    assert.deepEqual(await store.load(key), main);
    assert.deepEqual(await store.listSubkeys(key), ["subagents/agent-2"]);
    assert.deepEqual((await store.listSessions(key.projectKey)).map((s) => s.sessionId), [key.sessionId]);
  });

  test("(12) listSubkeys returns only this session's subpaths", async () => {
    const p = project();
    const a = { projectKey: p, sessionId: uuid() };
    const b = { projectKey: p, sessionId: uuid() };
    const c = { projectKey: project(), sessionId: a.sessionId };
    await store.append({ ...a, subpath: "subagents/agent-a1" }, batch(a.sessionId, 1));
    await store.append({ ...a, subpath: "subagents/agent-a2" }, batch(a.sessionId, 1));
    await store.append({ ...b, subpath: "subagents/agent-b1" }, batch(b.sessionId, 1));
    await store.append({ ...c, subpath: "subagents/agent-c1" }, batch(c.sessionId, 1));
    assert.deepEqual(sorted(await store.listSubkeys(a)), ["subagents/agent-a1", "subagents/agent-a2"]);
    assert.deepEqual(await store.listSubkeys(b), ["subagents/agent-b1"]);
    assert.deepEqual(await store.listSubkeys(c), ["subagents/agent-c1"]);
  });

  test("(13) listSubkeys excludes the main transcript; unknown session: []", async () => {
    const key = { projectKey: project(), sessionId: uuid() };
    await store.append(key, batch(key.sessionId, 2));
    assert.deepEqual(await store.listSubkeys(key), []);
    await store.append({ ...key, subpath: "subagents/agent-q" }, batch(key.sessionId, 1));
    assert.deepEqual(await store.listSubkeys(key), ["subagents/agent-q"]);
    assert.deepEqual(await store.listSubkeys({ projectKey: key.projectKey, sessionId: uuid() }), []);
    assert.deepEqual(await store.listSubkeys({ projectKey: project(), sessionId: uuid() }), []);
  });

  test("(14) summaries: only the project's, mtime >= listSessions', data as folded, subagents leave it, gone after delete", async () => {
    const p = project();
    const s1 = { projectKey: p, sessionId: uuid() };
    const s2 = { projectKey: p, sessionId: uuid() };
    const elsewhere = { projectKey: project(), sessionId: uuid() };
    const b1 = batch(s1.sessionId, 2, "first");
    const b2 = [{ type: "custom-title", customTitle: "Title one", sessionId: s1.sessionId }, ...batch(s1.sessionId, 2, "second")];
    const b3 = batch(s2.sessionId, 2, "other");
    await store.append(s1, b1);
    await store.append(s1, b2);
    await store.append(s2, b3);
    await store.append(elsewhere, batch(elsewhere.sessionId, 1));

    const want1 = foldSessionSummary(foldSessionSummary(undefined, s1, b1), s1, b2).data;
    const want2 = foldSessionSummary(undefined, s2, b3).data;
    const sums = await store.listSessionSummaries(p);
    assert.deepEqual(sorted(sums.map((s) => s.sessionId)), sorted([s1.sessionId, s2.sessionId]));
    const byId = new Map(sums.map((s) => [s.sessionId, s]));
    assert.deepEqual(byId.get(s1.sessionId).data, want1);
    assert.deepEqual(byId.get(s2.sessionId).data, want2);
    const mtimes = new Map((await store.listSessions(p)).map((s) => [s.sessionId, s.mtime]));
    for (const s of sums) {
      assert.ok(Number.isInteger(s.mtime) && s.mtime > 1e12);
      assert.ok(s.mtime >= mtimes.get(s.sessionId), `summary mtime ${s.mtime} >= listSessions mtime ${mtimes.get(s.sessionId)}`);
    }

    // A subagent append leaves the session's summary as it was.
    await store.append({ ...s1, subpath: "subagents/agent-s" }, batch(s1.sessionId, 2, "sub").map((e) => ({ ...e, isSidechain: true })));
    const again = new Map((await store.listSessionSummaries(p)).map((s) => [s.sessionId, s]));
    assert.deepEqual(again.get(s1.sessionId).data, want1);

    await store.delete(s1);
    assert.deepEqual((await store.listSessionSummaries(p)).map((s) => s.sessionId), [s2.sessionId]);
    await store.delete(s2);
    assert.deepEqual(await store.listSessionSummaries(p), []);
    assert.deepEqual(await store.listSessionSummaries(project()), []);
  });
});
