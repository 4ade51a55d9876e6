// Entries come back from sessiond deep-equal (and byte-equal once
// re-stringified) to what was appended, whatever they hold; lines that are
// not JSON objects are skipped on load.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { SessiondStore } from "../dist/index.js";
import { startDaemon, userEntry, uuid } from "./helpers.mjs";

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

const project = () => `-tmp-roundtrip-${randomBytes(4).toString("hex")}`;

async function roundTrip(entries) {
  const key = { projectKey: project(), sessionId: uuid() };
  await store.append(key, entries);
  const got = await store.load(key);
  assert.deepEqual(got, entries);
  // Key order and string contents are kept too.
  assert.equal(JSON.stringify(got), JSON.stringify(entries));
  return key;
}

function nested(depth) {
  let v = { leaf: "bottom", n: depth };
  for (let i = 0; i < depth; i++) v = { d: i, child: v, arr: [i] };
  return v;
}

describe("round trip", () => {
  test("a lone surrogate inside a string", async () => {
    const sid = uuid();
    await roundTrip([
      userEntry(sid, "broken emoji \ud83d here"),
      { type: "assistant", uuid: uuid(), text: "low \udc00 alone", pair: "\ud83d\ude00", end: "\ud83d" },
    ]);
  });

  test("U+2028, U+2029, NUL escapes, HTML characters, emoji and other Unicode", async () => {
    const sid = uuid();
    await roundTrip([
      userEntry(sid, "line\u2028separator and paragraph\u2029separator"),
      { type: "system", uuid: uuid(), s: "nul \u0000 bell \u0007 <script>&amp;</script> \"quoted\" back\\slash tab\t nl\n cr\r" },
      { type: "system", uuid: uuid(), s: "日本語 ñ é 🎉 \u{10FFFF} \uFEFF", "key with spaces": 1, "ключ": "значение" },
    ]);
  });

  test("numbers and literals", async () => {
    await roundTrip([
      { type: "numbers", a: 0, b: 0.1, c: 1e21, d: -1.5e-7, e: 9007199254740991, f: 123456789012345680000, g: true, h: false, i: null, j: [], k: {} },
    ]);
  });

  test("200-deep nesting", async () => {
    await roundTrip([{ type: "user", uuid: uuid(), deep: nested(200) }]);
  });

  test("a 5 MB entry", async () => {
    const big = randomBytes(3_750_000).toString("base64"); // 5 000 000 characters
    const sid = uuid();
    await roundTrip([
      userEntry(sid, "before"),
      { type: "user", uuid: uuid(), toolUseResult: { stdout: big }, message: { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_x", content: big }] } },
      userEntry(sid, "after"),
    ]);
  });

  test("unknown entry types, agent_metadata and entries without uuid are kept untouched", async () => {
    const sid = uuid();
    await roundTrip([
      { type: "some-future-type", payload: { x: [1, 2, { y: "z" }] } },
      { type: "queue-operation", operation: "enqueue", timestamp: new Date().toISOString(), sessionId: sid },
      { type: "agent_metadata", agentType: "general-purpose", isBuiltIn: true, toolUseId: "toolu_1" },
      { zzz: 1, type: "type-not-first", aaa: 2 },
    ]);
  });

  test("many entries in one batch and many batches", async () => {
    const sid = uuid();
    const key = { projectKey: project(), sessionId: sid };
    const all = [];
    for (let b = 0; b < 20; b++) {
      const batch = Array.from({ length: 50 }, (_, i) => userEntry(sid, `batch ${b} entry ${i}`));
      all.push(...batch);
      await store.append(key, batch);
    }
    assert.deepEqual(await store.load(key), all);
  });

  test("a batch bigger than one request goes as several, in order", async () => {
    const small = new SessiondStore({ socketPath: daemon.socket, maxRequestBytes: 4096 });
    try {
      const sid = uuid();
      const key = { projectKey: project(), sessionId: sid };
      const batch = Array.from({ length: 40 }, (_, i) => ({ type: "x", i, pad: "p".repeat(500) }));
      await small.append(key, batch);
      assert.deepEqual(await small.load(key), batch);
      const sums = await small.listSessionSummaries(key.projectKey);
      assert.equal(sums.length, 1);
    } finally {
      small.close();
    }
  });

  test("entries that are not JSON objects are refused before anything is sent", async () => {
    const key = { projectKey: project(), sessionId: uuid() };
    await assert.rejects(store.append(key, [{ type: "ok" }, null]), TypeError);
    await assert.rejects(store.append(key, [[1, 2]]), TypeError);
    assert.equal(await store.load(key), null);
  });

  test("lines that are not JSON objects (torn, foreign) are skipped on load", async () => {
    // A transcript another program wrote (the CLI before sessiond, say),
    // with a torn line, junk and a JSON array among good lines.
    const p = project();
    const sid = uuid();
    const key = { projectKey: p, sessionId: sid };
    mkdirSync(join(daemon.root, "projects", p), { recursive: true, mode: 0o700 });
    const one = userEntry(sid, "one");
    const two = userEntry(sid, "two");
    writeFileSync(
      join(daemon.root, "projects", p, `${sid}.jsonl`),
      JSON.stringify(one) + '\n{"type":"user","uuid":"torn\nnot json at all\n[1,2,3]\n"a string"\n' + JSON.stringify(two) + "\n",
      { mode: 0o600 },
    );
    assert.deepEqual(await store.load(key), [one, two]);
    // Appending goes on after them.
    const three = userEntry(sid, "three");
    await store.append(key, [three]);
    assert.deepEqual(await store.load(key), [one, two, three]);
  });

  test("a transcript holding only unreadable lines loads as [], an empty file as null", async () => {
    const p = project();
    mkdirSync(join(daemon.root, "projects", p), { recursive: true, mode: 0o700 });
    const junk = uuid();
    writeFileSync(join(daemon.root, "projects", p, `${junk}.jsonl`), "garbage\n{\"torn\":\n", { mode: 0o600 });
    assert.deepEqual(await store.load({ projectKey: p, sessionId: junk }), []);
    const empty = uuid();
    writeFileSync(join(daemon.root, "projects", p, `${empty}.jsonl`), "", { mode: 0o600 });
    assert.equal(await store.load({ projectKey: p, sessionId: empty }), null);
  });
});
