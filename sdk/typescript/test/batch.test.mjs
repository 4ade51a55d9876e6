// Batch ids: a batch sent again (by our own retries, or by the SDK calling
// append() again with the same array) is stored once; equal batches sent
// as two batches are both stored. And the daemon's refusals reach the
// caller with the daemon's message.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { EventEmitter } from "node:events";
import { readdirSync, readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";

import { Metadata, status } from "@grpc/grpc-js";

import { SessiondError, SessiondStore } from "../dist/index.js";
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

const project = () => `-tmp-batch-${randomBytes(4).toString("hex")}`;

// Entries without uuid: only the batch id can tell a retry from a new batch.
const noUuid = (n, tag) => Array.from({ length: n }, (_, i) => ({ type: "queue-operation", operation: "enqueue", content: `${tag} ${i}` }));

/**
 * loseAnswers makes the next n Append calls of s reach the daemon and be
 * stored, then fail on the client as a dropped connection would
 * (UNAVAILABLE): the answer is lost. It records the batch ids sent.
 */
function loseAnswers(s, n) {
  const sent = [];
  const conn = s.conn;
  const realClient = conn.client.bind(conn);
  conn.client = () => {
    const c = realClient();
    return new Proxy(c, {
      get(target, prop) {
        if (prop !== "append") return Reflect.get(target, prop);
        return (req, md, opts, cb) => {
          sent.push(req.batchId);
          return target.append(req, md, opts, (err, resp) => {
            if (err || n <= 0) return cb(err, resp);
            n--;
            const lost = Object.assign(new Error("14 UNAVAILABLE: connection dropped (simulated)"), {
              code: status.UNAVAILABLE,
              details: "connection dropped (simulated)",
              metadata: new Metadata(),
            });
            cb(lost, undefined);
          });
        };
      },
    });
  };
  return sent;
}

describe("batch ids", () => {
  test("the same batch id twice: stored once, the second answered duplicate_batch", async () => {
    const key = { projectKey: project(), sessionId: uuid() };
    const batch = noUuid(3, "once");
    const id = uuid();
    const first = await store.appendWithBatchId(key, batch, id);
    assert.equal(first.duplicateBatch, false);
    const second = await store.appendWithBatchId(key, batch, id);
    assert.equal(second.duplicateBatch, true, "the retry is recognised");
    assert.ok(second.results.every((r) => r.outcome === 2 /* DUPLICATE */));
    assert.deepEqual(await store.load(key), batch);
    // Also on a subagent transcript.
    const sub = { ...key, subpath: "subagents/agent-b" };
    await store.appendWithBatchId(sub, batch, id);
    assert.equal((await store.appendWithBatchId(sub, batch, id)).duplicateBatch, true);
    assert.deepEqual(await store.load(sub), batch);
  });

  test("two equal batches with different ids are both stored", async () => {
    const key = { projectKey: project(), sessionId: uuid() };
    const batch = noUuid(2, "twice");
    await store.appendWithBatchId(key, batch, uuid());
    await store.appendWithBatchId(key, batch, uuid());
    assert.deepEqual(await store.load(key), [...batch, ...batch]);
    // And through append(): two calls, two batches.
    await store.append(key, batch);
    await store.append(key, batch);
    assert.equal((await store.load(key)).length, 8);
  });

  test("a lost answer is retried with the same batch id and stored once", async () => {
    const s = new SessiondStore({ socketPath: daemon.socket, retryDelaysMs: [50, 50] });
    try {
      const sent = loseAnswers(s, 1);
      const key = { projectKey: project(), sessionId: uuid() };
      const batch = noUuid(4, "lost");
      await s.append(key, batch);
      assert.equal(sent.length, 2, "sent twice");
      assert.equal(sent[0], sent[1], "with one batch id");
      assert.deepEqual(await s.load(key), batch);
    } finally {
      s.close();
    }
  });

  test("the SDK calling append() again with the same array reuses its batch id", async () => {
    // No retries of our own: the first append() fails as the daemon stored it.
    const s = new SessiondStore({ socketPath: daemon.socket, retryDelaysMs: [] });
    try {
      const sent = loseAnswers(s, 1);
      const key = { projectKey: project(), sessionId: uuid() };
      const batch = noUuid(3, "sdk-retry");
      await assert.rejects(s.append(key, batch), (err) => err instanceof SessiondError && err.code === status.UNAVAILABLE);
      await s.append({ ...key }, batch); // the SDK's retry: same array, a new key object
      assert.equal(sent.length, 2);
      assert.equal(sent[0], sent[1]);
      assert.deepEqual(await s.load(key), batch);
      // Once it succeeded, the same array appended again is a new batch.
      await s.append(key, batch);
      assert.notEqual(sent[2], sent[0]);
      assert.deepEqual(await s.load(key), [...batch, ...batch]);
    } finally {
      s.close();
    }
  });

  test("an array refilled with other entries gets a new batch id", async () => {
    const s = new SessiondStore({ socketPath: daemon.socket, retryDelaysMs: [] });
    try {
      const sent = loseAnswers(s, 1);
      const key = { projectKey: project(), sessionId: uuid() };
      const buf = noUuid(2, "first");
      const firstCopy = [...buf];
      await assert.rejects(s.append(key, buf));
      buf.splice(0, buf.length, ...noUuid(2, "second"));
      await s.append(key, buf);
      assert.notEqual(sent[0], sent[1]);
      assert.deepEqual(await s.load(key), [...firstCopy, ...buf]);
    } finally {
      s.close();
    }
  });

  test("entries whose uuid the session holds are not stored twice", async () => {
    const key = { projectKey: project(), sessionId: uuid() };
    const e = userEntry(key.sessionId, "hello");
    await store.append(key, [e]);
    await store.append(key, [{ ...e }, userEntry(key.sessionId, "next")]);
    const got = await store.load(key);
    assert.equal(got.length, 2);
    assert.deepEqual(got[0], e);
  });
});

describe("refusals", () => {
  test("a session id that is neither a UUID nor a safe name: INVALID_ARGUMENT with the daemon's message", async () => {
    const key = { projectKey: project(), sessionId: "../not-a-uuid" };
    await assert.rejects(store.append(key, [{ type: "x" }]), (err) => {
      assert.ok(err instanceof SessiondError);
      assert.equal(err.code, status.INVALID_ARGUMENT);
      assert.equal(err.codeName, "INVALID_ARGUMENT");
      assert.match(err.message, /session id "\.\.\/not-a-uuid"/);
      assert.match(err.message, /want a UUID such as .* or up to 128 bytes of \[a-z0-9._-\]/);
      return true;
    });
    await assert.rejects(store.load(key), (err) => err instanceof SessiondError && err.code === status.INVALID_ARGUMENT);
  });

  test("an empty subpath is refused before anything is sent", async () => {
    const key = { projectKey: project(), sessionId: uuid(), subpath: "" };
    await assert.rejects(store.append(key, [{ type: "x" }]), TypeError);
    await assert.rejects(store.load(key), TypeError);
    await assert.rejects(store.delete(key), TypeError);
    assert.equal(await store.load({ projectKey: key.projectKey, sessionId: key.sessionId }), null);
  });

  test("a subpath escaping the session folder is refused by the daemon", async () => {
    const key = { projectKey: project(), sessionId: uuid(), subpath: "../escape" };
    await assert.rejects(store.append(key, [{ type: "x" }]), (err) => err instanceof SessiondError && err.code === status.INVALID_ARGUMENT);
  });

  test("an entry over the daemon's size limit is refused with its message", async () => {
    const d = await startDaemon({ args: ["--max-entry-bytes", "1000"] });
    const s = new SessiondStore({ socketPath: d.socket });
    try {
      const key = { projectKey: project(), sessionId: uuid() };
      await assert.rejects(s.append(key, [{ type: "x", pad: "y".repeat(2000) }]), (err) => {
        assert.ok(err instanceof SessiondError);
        assert.equal(err.code, status.INVALID_ARGUMENT);
        return true;
      });
      assert.equal(await s.load(key), null);
    } finally {
      s.close();
      await d.stop();
    }
  });
});

/**
 * stopped sends SIGSTOP and waits until the kernel says the process is
 * stopped: the signal is delivered asynchronously, and a daemon still
 * running for a moment would answer the call the test means to leave
 * waiting.
 */
async function stopped(child) {
  child.kill("SIGSTOP");
  const state = (path) => {
    const stat = readFileSync(path, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
  };
  for (let i = 0; i < 500; i++) {
    // Every thread: the Go runtime's threads stop one by one.
    const tasks = readdirSync(`/proc/${child.pid}/task`);
    if (tasks.every((t) => state(`/proc/${child.pid}/task/${t}/stat`) === "T")) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`sessiond (pid ${child.pid}) did not stop`);
}

describe("messages a person reads", () => {
  test("a daemon that does not answer in time: what happened and what to do, not gRPC's text", async () => {
    const d = await startDaemon();
    const s = new SessiondStore({ socketPath: d.socket, callTimeoutMs: 300, loadTimeoutMs: 300, retryDelaysMs: [] });
    try {
      await s.listSessions(project()); // connected
      await stopped(d.child);
      try {
        await assert.rejects(s.load({ projectKey: project(), sessionId: uuid() }), (err) => {
          assert.ok(err instanceof SessiondError, String(err));
          assert.equal(err.code, status.DEADLINE_EXCEEDED);
          assert.match(err.message, /did not answer in time .*sessionctl status/);
          assert.doesNotMatch(err.message, /Deadline exceeded after|LB pick/);
          return true;
        });
      } finally {
        d.child.kill("SIGCONT");
      }
    } finally {
      s.close();
      await d.stop();
    }
  });

  test("a summary that cannot be read is said, and the entries are stored", async () => {
    const s = new SessiondStore({ socketPath: daemon.socket });
    const k = { projectKey: project(), sessionId: uuid() };
    const e = userEntry(k.sessionId, "kept");
    const conn = s.conn;
    const realClient = conn.client.bind(conn);
    conn.client = () =>
      new Proxy(realClient(), {
        get(target, prop) {
          if (prop !== "listSummaries") return Reflect.get(target, prop);
          // A streaming call that fails at once, as grpc-js reports it.
          return () => {
            const stream = new EventEmitter();
            setImmediate(() =>
              stream.emit("error", Object.assign(new Error("15 DATA_LOSS: damaged (simulated)"), { code: status.DATA_LOSS, details: "a journal record failed its checksum (simulated)", metadata: new Metadata() })),
            );
            return stream;
          };
        },
      });
    const warnings = [];
    const onWarning = (w) => {
      if (w.code === "SESSIOND_SUMMARY") warnings.push(w.message);
    };
    process.on("warning", onWarning);
    try {
      await s.append(k, [e]);
      await new Promise((r) => setImmediate(r)); // warnings are emitted on the next tick
    } finally {
      process.off("warning", onWarning);
      s.close();
    }
    assert.equal(warnings.length, 1, warnings.join("\n"));
    assert.match(warnings[0], /cannot read the summary to fold onto \(.*failed its checksum/);
    const check = new SessiondStore({ socketPath: daemon.socket });
    try {
      assert.deepEqual(await check.load(k), [e]);
    } finally {
      check.close();
    }
  });
});
