// The SessionStore conformance cases of ../../../shared/docs/transcripts.md
// ("Conformance cases (the official suite)"), against a real sessiond, with
// the ids and entry shapes of the kit the TypeScript SDK's repository keeps
// beside its reference stores: sessions "sess", "s1", "main", projects
// "proj", "A", "B", "P", subpaths "subagents/agent-1", entries
// {type: "x", uuid: "a"}. Those names are fixed, so each case gets a
// daemon of its own on an empty root, as the kit gives each a fresh store.

import assert from "node:assert/strict";
import { afterEach, beforeEach, describe, test } from "node:test";

import { foldSessionSummary } from "@anthropic-ai/claude-agent-sdk";

import { SessiondStore } from "../dist/index.js";
import { startDaemon } from "./helpers.mjs";

let daemon;
let store;

beforeEach(async () => {
  daemon = await startDaemon();
  store = new SessiondStore({ socketPath: daemon.socket });
});

afterEach(async () => {
  store?.close();
  await daemon?.stop();
  store = daemon = undefined;
});

const KEY = { projectKey: "proj", sessionId: "sess" };
const e = (fields) => ({ type: "x", ...fields });
const sorted = (xs) => [...xs].sort();

describe("SessionStore conformance", () => {
  test("(1) append then load is deep-equal and ordered", async () => {
    await store.append(KEY, [e({ uuid: "b", n: 1 }), e({ uuid: "a", n: 2 }), e({ n: 3 })]);
    assert.deepEqual(await store.load(KEY), [e({ uuid: "b", n: 1 }), e({ uuid: "a", n: 2 }), e({ n: 3 })]);
  });

  test("(2) an unknown session or an unknown subpath loads null", async () => {
    assert.equal(await store.load({ projectKey: "proj", sessionId: "nope" }), null);
    await store.append(KEY, [e({ uuid: "x", n: 1 })]);
    assert.equal(await store.load({ ...KEY, subpath: "nope" }), null);
    assert.equal(await store.load({ projectKey: "P", sessionId: "sess" }), null);
  });

  test("(3) several appends load concatenated in call order", async () => {
    await store.append(KEY, [e({ uuid: "z", n: 1 })]);
    await store.append(KEY, [e({ uuid: "a", n: 2 }), e({ uuid: "m", n: 3 })]);
    await store.append(KEY, [e({ uuid: "b", n: 4 })]);
    const want = [e({ uuid: "z", n: 1 }), e({ uuid: "a", n: 2 }), e({ uuid: "m", n: 3 }), e({ uuid: "b", n: 4 })];
    assert.deepEqual(await store.load(KEY), want);
    // Not awaited one by one: still call order.
    await Promise.all([store.append(KEY, [e({ uuid: "d" })]), store.append(KEY, [e({ uuid: "e" })]), store.append(KEY, [e({ uuid: "f" })])]);
    assert.deepEqual(await store.load(KEY), [...want, e({ uuid: "d" }), e({ uuid: "e" }), e({ uuid: "f" })]);
  });

  test("(4) appending [] is a no-op and a fresh key still loads null", async () => {
    await store.append(KEY, []);
    assert.equal(await store.load(KEY), null);
    assert.deepEqual(await store.listSessions("proj"), []);
    await store.append({ ...KEY, subpath: "subagents/agent-1" }, []);
    assert.equal(await store.load({ ...KEY, subpath: "subagents/agent-1" }), null);
    await store.append(KEY, [e({ uuid: "a", n: 1 })]);
    await store.append(KEY, []);
    assert.deepEqual(await store.load(KEY), [e({ uuid: "a", n: 1 })]);
  });

  test("(5) a subpath is stored apart from the main transcript", async () => {
    const sub = { ...KEY, subpath: "subagents/agent-1" };
    await store.append(KEY, [e({ uuid: "m", n: 1 })]);
    await store.append(sub, [e({ uuid: "s", n: 1 })]);
    assert.deepEqual(await store.load(KEY), [e({ uuid: "m", n: 1 })]);
    assert.deepEqual(await store.load(sub), [e({ uuid: "s", n: 1 })]);
  });

  test("(6) the same session id under two projects stays separate and each lists it", async () => {
    await store.append({ projectKey: "A", sessionId: "s1" }, [e({ from: "A" })]);
    await store.append({ projectKey: "B", sessionId: "s1" }, [e({ from: "B" })]);
    assert.deepEqual(await store.load({ projectKey: "A", sessionId: "s1" }), [e({ from: "A" })]);
    assert.deepEqual(await store.load({ projectKey: "B", sessionId: "s1" }), [e({ from: "B" })]);
    assert.deepEqual((await store.listSessions("A")).map((s) => s.sessionId), ["s1"]);
    assert.deepEqual((await store.listSessions("B")).map((s) => s.sessionId), ["s1"]);
  });

  test("(7) listSessions returns exactly the project's ids with epoch-ms mtimes; unknown project: []", async () => {
    const before = Date.now();
    await store.append({ projectKey: "proj", sessionId: "a" }, [e({ n: 1 })]);
    await store.append({ projectKey: "proj", sessionId: "b" }, [e({ n: 1 })]);
    await store.append({ projectKey: "other", sessionId: "c" }, [e({ n: 1 })]);
    const list = await store.listSessions("proj");
    assert.deepEqual(sorted(list.map((s) => s.sessionId)), ["a", "b"]);
    for (const s of list) {
      assert.deepEqual(Object.keys(s).sort(), ["mtime", "sessionId"]);
      assert.ok(Number.isInteger(s.mtime) && s.mtime > 1e12, `mtime ${s.mtime} is epoch ms`);
      assert.ok(s.mtime >= before - 2000 && s.mtime <= Date.now() + 2000, `mtime ${s.mtime} is now`);
    }
    assert.deepEqual(await store.listSessions("never-appended-project"), []);
  });

  test("(8) sessions with only subpath rows are not listed", async () => {
    await store.append({ projectKey: "proj", sessionId: "main" }, [e({ n: 1 })]);
    await store.append({ projectKey: "proj", sessionId: "main", subpath: "subagents/agent-1" }, [e({ n: 1 })]);
    await store.append({ projectKey: "proj", sessionId: "s", subpath: "subagents/agent-1" }, [e({ n: 1 })]);
    assert.deepEqual((await store.listSessions("proj")).map((s) => s.sessionId), ["main"]);
    assert.deepEqual(await store.listSubkeys({ projectKey: "proj", sessionId: "s" }), ["subagents/agent-1"]);
  });

  test("(9) deleting a never-written key does not fail; delete then load is null", async () => {
    await store.delete({ projectKey: "proj", sessionId: "never-written" });
    await store.delete({ ...KEY, subpath: "subagents/agent-1" });
    await store.append(KEY, [e({ n: 1 })]);
    await store.delete(KEY);
    assert.equal(await store.load(KEY), null);
    assert.deepEqual(await store.listSessions("proj"), []);
    await store.delete(KEY); // twice
  });

  test("(10) deleting a main key cascades to its subpaths; other sessions and projects survive", async () => {
    const sub1 = { ...KEY, subpath: "subagents/agent-1" };
    const sub2 = { ...KEY, subpath: "subagents/agent-2" };
    const other = { projectKey: "proj", sessionId: "sess2" };
    const otherProj = { projectKey: "other-proj", sessionId: "sess" };
    await store.append(KEY, [e({ n: 1 })]);
    await store.append(sub1, [e({ n: 1 })]);
    await store.append(sub2, [e({ n: 1 })]);
    await store.append(other, [e({ n: 1 })]);
    await store.append({ ...other, subpath: "subagents/agent-1" }, [e({ n: 2 })]);
    await store.append(otherProj, [e({ n: 1 })]);
    await store.append({ ...otherProj, subpath: "subagents/agent-1" }, [e({ n: 2 })]);

    await store.delete(KEY);

    assert.equal(await store.load(KEY), null);
    assert.equal(await store.load(sub1), null);
    assert.equal(await store.load(sub2), null);
    assert.deepEqual(await store.listSubkeys(KEY), []);
    assert.deepEqual((await store.listSessions("proj")).map((s) => s.sessionId), ["sess2"]);
    assert.deepEqual(await store.load(other), [e({ n: 1 })]);
    assert.deepEqual(await store.listSubkeys(other), ["subagents/agent-1"]);
    assert.deepEqual(await store.load(otherProj), [e({ n: 1 })]);
    assert.deepEqual(await store.listSubkeys(otherProj), ["subagents/agent-1"]);
    assert.deepEqual((await store.listSessions("other-proj")).map((s) => s.sessionId), ["sess"]);
  });

  test("(11) deleting one subpath leaves its siblings and the main transcript", async () => {
    const sub1 = { ...KEY, subpath: "subagents/agent-1" };
    const sub2 = { ...KEY, subpath: "subagents/agent-2" };
    await store.append(KEY, [e({ n: 1 })]);
    await store.append(sub1, [e({ n: 1 })]);
    await store.append(sub2, [e({ n: 2 })]);
    await store.delete(sub1);
    assert.equal(await store.load(sub1), null);
    assert.deepEqual(await store.load(sub2), [e({ n: 2 })]);
    assert.deepEqual(await store.load(KEY), [e({ n: 1 })]);
    assert.deepEqual(await store.listSubkeys(KEY), ["subagents/agent-2"]);
    assert.deepEqual((await store.listSessions("proj")).map((s) => s.sessionId), ["sess"]);
  });

  test("(12) listSubkeys returns only this session's subpaths", async () => {
    await store.append(KEY, [e({ n: 1 })]);
    await store.append({ ...KEY, subpath: "subagents/agent-1" }, [e({ n: 1 })]);
    await store.append({ ...KEY, subpath: "subagents/agent-2" }, [e({ n: 1 })]);
    await store.append({ projectKey: "proj", sessionId: "other-sess", subpath: "subagents/agent-x" }, [e({ n: 1 })]);
    await store.append({ projectKey: "P", sessionId: "sess", subpath: "subagents/agent-p" }, [e({ n: 1 })]);
    assert.deepEqual(sorted(await store.listSubkeys(KEY)), ["subagents/agent-1", "subagents/agent-2"]);
    assert.deepEqual(await store.listSubkeys({ projectKey: "proj", sessionId: "other-sess" }), ["subagents/agent-x"]);
    assert.deepEqual(await store.listSubkeys({ projectKey: "P", sessionId: "sess" }), ["subagents/agent-p"]);
  });

  test("(13) listSubkeys excludes the main transcript; unknown session: []", async () => {
    await store.append(KEY, [e({ n: 1 })]);
    assert.deepEqual(await store.listSubkeys(KEY), []);
    assert.deepEqual(await store.listSubkeys({ projectKey: "proj", sessionId: "never-appended" }), []);
    assert.deepEqual(await store.listSubkeys({ projectKey: "never-appended-project", sessionId: "sess" }), []);
  });

  test("(14) summaries: only the project's, mtime >= listSessions', data as folded, subagents leave it, gone after delete", async () => {
    const s1 = { projectKey: "proj", sessionId: "summ-sess" };
    const s2 = { projectKey: "proj", sessionId: "s1" };
    const b1 = [e({ timestamp: "2024-01-01T00:00:00.000Z", customTitle: "first" }), e({ timestamp: "2024-01-01T00:00:01.000Z" })];
    const b2 = [e({ timestamp: "2024-01-01T00:00:02.000Z", customTitle: "second" })];
    const b3 = [e({ uuid: "a", timestamp: "2024-01-01T00:00:03.000Z" })];
    await store.append(s1, b1);
    await store.append(s1, b2);
    await store.append(s2, b3);
    await store.append({ projectKey: "other", sessionId: "elsewhere" }, [e({ timestamp: "2024-01-01T00:00:00.000Z" })]);

    const want1 = foldSessionSummary(foldSessionSummary(undefined, s1, b1), s1, b2).data;
    const want2 = foldSessionSummary(undefined, s2, b3).data;
    const sums = await store.listSessionSummaries("proj");
    assert.deepEqual(sorted(sums.map((s) => s.sessionId)), ["s1", "summ-sess"]);
    const byId = new Map(sums.map((s) => [s.sessionId, s]));
    assert.deepEqual(byId.get("summ-sess").data, want1);
    assert.deepEqual(byId.get("s1").data, want2);
    const mtimes = new Map((await store.listSessions("proj")).map((s) => [s.sessionId, s.mtime]));
    for (const s of sums) {
      assert.ok(Number.isInteger(s.mtime) && s.mtime > 1e12);
      assert.ok(s.mtime >= mtimes.get(s.sessionId), `summary mtime ${s.mtime} >= listSessions mtime ${mtimes.get(s.sessionId)}`);
    }

    // A subagent append leaves the session's summary as it was.
    await store.append({ ...s1, subpath: "subagents/agent-1" }, [e({ timestamp: "2024-01-01T00:00:09.000Z", customTitle: "subagent" })]);
    const again = new Map((await store.listSessionSummaries("proj")).map((s) => [s.sessionId, s]));
    assert.deepEqual(again.get("summ-sess").data, want1);

    await store.delete(s1);
    assert.deepEqual((await store.listSessionSummaries("proj")).map((s) => s.sessionId), ["s1"]);
    await store.delete(s2);
    assert.deepEqual(await store.listSessionSummaries("proj"), []);
    assert.deepEqual(await store.listSessionSummaries("never-appended-project"), []);
  });

  test("entries whose uuid is not a UUID are stored once, as UUIDs are", async () => {
    await store.append(KEY, [e({ uuid: "a", n: 1 })]);
    await store.append(KEY, [e({ uuid: "a", n: 1 }), e({ uuid: "b", n: 2 })]);
    assert.deepEqual(await store.load(KEY), [e({ uuid: "a", n: 1 }), e({ uuid: "b", n: 2 })]);
  });
});
