// The adapter sends nothing to a socket whose folder someone else could
// have made: a symlink, a folder of another user, a folder others may
// write to. Checked before the first connection and before every
// reconnection; never retried. The user's own daemon at the default
// socket works.

import assert from "node:assert/strict";
import { chmodSync, chownSync, mkdirSync, renameSync, symlinkSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { after, describe, test } from "node:test";

import { checkSocketFolder, defaultSocketPath, SocketMissingError, SessiondStore, UntrustedSocketError } from "../dist/index.js";
import { startDaemon, tempDir, userEntry, uuid } from "./helpers.mjs";

const isRoot = process.geteuid() === 0;
const NOBODY = 65534;

/** A raw listener that counts the connections and bytes it receives. */
async function impostor(sock) {
  const seen = { connections: 0, bytes: 0 };
  const server = createServer((c) => {
    seen.connections++;
    c.on("data", (b) => {
      seen.bytes += b.length;
    });
    c.on("error", () => {});
  });
  await new Promise((res, rej) => server.listen(sock, res).once("error", rej));
  return { seen, close: () => new Promise((r) => server.close(r)) };
}

// Every method of the store is refused with UntrustedSocketError.
async function assertRefusedEverywhere(store, folder, ownerUid) {
  const key = { projectKey: "-p", sessionId: uuid() };
  const check = (err) => {
    assert.ok(err instanceof UntrustedSocketError, `want UntrustedSocketError, got ${err}`);
    assert.equal(err.retryable, false);
    assert.equal(err.folder, folder);
    assert.equal(err.ownerUid, ownerUid);
    assert.ok(err.message.includes(store.socketPath), "names the socket");
    assert.ok(err.message.includes(`uid ${ownerUid}`), "names the folder's owner");
    assert.match(err.message, /remove .* once you have checked who made it/);
    assert.match(err.message, /SESSIOND_SOCKET \(or XDG_RUNTIME_DIR\)/);
    return true;
  };
  const started = Date.now();
  await assert.rejects(store.append(key, [userEntry(key.sessionId, "secret")]), check);
  assert.ok(Date.now() - started < 1000, "not retried");
  await assert.rejects(store.load(key), check);
  await assert.rejects(store.listSessions("-p"), check);
  await assert.rejects(store.listSessionSummaries("-p"), check);
  await assert.rejects(store.delete(key), check);
  await assert.rejects(store.listSubkeys(key), check);
}

describe("untrusted sockets", () => {
  const cleanups = [];
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  test("a socket folder that is a symlink is refused and the listener gets no byte", async () => {
    const base = tempDir("sec-");
    const real = join(base, "real");
    mkdirSync(real, { mode: 0o700 });
    const imp = await impostor(join(real, "s.sock"));
    cleanups.push(imp.close);
    const link = join(base, "link");
    symlinkSync(real, link);
    const store = new SessiondStore({ socketPath: join(link, "s.sock") });
    await assertRefusedEverywhere(store, link, process.geteuid());
    assert.match((await store.load({ projectKey: "-p", sessionId: uuid() }).catch((e) => e)).message, /symbolic link/);
    store.close();
    await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(imp.seen, { connections: 0, bytes: 0 });
  });

  test("a socket folder others may write to is refused", async () => {
    const base = tempDir("sec-");
    const open = join(base, "open");
    mkdirSync(open);
    chmodSync(open, 0o777);
    const imp = await impostor(join(open, "s.sock"));
    cleanups.push(imp.close);
    const store = new SessiondStore({ socketPath: join(open, "s.sock") });
    await assertRefusedEverywhere(store, open, process.geteuid());
    chmodSync(open, 0o720); // group write alone is as bad
    await assert.rejects(store.listSessions("-p"), /can be written by its group or by others \(mode 0720\)/);
    store.close();
    assert.deepEqual(imp.seen, { connections: 0, bytes: 0 });
  });

  test("a socket folder of another user is refused", { skip: !isRoot && "needs root to chown a folder to another user" }, async () => {
    const base = tempDir("sec-");
    const theirs = join(base, "theirs");
    mkdirSync(theirs, { mode: 0o700 });
    const imp = await impostor(join(theirs, "s.sock"));
    cleanups.push(imp.close);
    chownSync(theirs, NOBODY, NOBODY);
    chownSync(join(theirs, "s.sock"), NOBODY, NOBODY);
    const store = new SessiondStore({ socketPath: join(theirs, "s.sock") });
    await assertRefusedEverywhere(store, theirs, NOBODY);
    assert.match((await store.listSessions("-p").catch((e) => e)).message, new RegExp(`belongs to uid ${NOBODY}, not to you \\(uid 0\\) or root`));
    store.close();
    assert.deepEqual(imp.seen, { connections: 0, bytes: 0 });
  });

  test("the /tmp/sessiond-<uid> fallback planted by another user is refused", { skip: !isRoot && "needs root to play the other user" }, async () => {
    const base = tempDir("sec-");
    // The default socket with no XDG_RUNTIME_DIR and a state folder too
    // deep for a socket path: /tmp/sessiond-<uid>. Played in a copy of /tmp.
    const planted = join(base, `sessiond-${process.getuid()}`);
    mkdirSync(planted, { mode: 0o755 });
    const imp = await impostor(join(planted, "sessiond.sock"));
    cleanups.push(imp.close);
    chownSync(planted, NOBODY, NOBODY);
    const store = new SessiondStore({ socketPath: join(planted, "sessiond.sock") });
    await assertRefusedEverywhere(store, planted, NOBODY);
    store.close();
    assert.deepEqual(imp.seen, { connections: 0, bytes: 0 });
  });

  test("a folder replaced by a symlink while connected is refused at the reconnection", async () => {
    const base = tempDir("sec-");
    const run = join(base, "run");
    const d = await startDaemon({ dir: base, socket: join(run, "s.sock") });
    // No retries: the refusal must come from the check grpc-js runs before it
    // reconnects the existing channel, not from a new channel.
    const store = new SessiondStore({ socketPath: join(run, "s.sock"), retryDelaysMs: [] });
    try {
      const key = { projectKey: "-p", sessionId: uuid() };
      await store.append(key, [userEntry(key.sessionId, "before")]);
      assert.ok(store.conn.current !== undefined, "the first append's channel stays open");
      await d.stop();
      // Someone swaps the folder for a link to theirs, with a listener.
      renameSync(run, join(base, "old-run"));
      const evil = join(base, "evil");
      mkdirSync(evil, { mode: 0o700 });
      const imp = await impostor(join(evil, "s.sock"));
      cleanups.push(imp.close);
      symlinkSync(evil, run);
      await assert.rejects(store.append(key, [userEntry(key.sessionId, "after")]), (err) => err instanceof UntrustedSocketError);
      await assert.rejects(store.load(key), (err) => err instanceof UntrustedSocketError);
      await new Promise((r) => setTimeout(r, 100));
      assert.deepEqual(imp.seen, { connections: 0, bytes: 0 });
    } finally {
      store.close();
      await d.stop();
    }
  });

  test("no folder at all: SocketMissingError after the retries, naming the socket", async () => {
    const sock = join(tempDir("sec-"), "nothing", "s.sock");
    const store = new SessiondStore({ socketPath: sock, retryDelaysMs: [20, 20] });
    await assert.rejects(store.listSessions("-p"), (err) => {
      assert.ok(err instanceof SocketMissingError, String(err));
      assert.ok(err.message.includes(sock));
      return true;
    });
    store.close();
  });

  test("checkSocketFolder accepts a private folder of the user", () => {
    const base = tempDir("sec-");
    const mine = join(base, "mine");
    mkdirSync(mine, { mode: 0o700 });
    checkSocketFolder(join(mine, "s.sock"));
    chmodSync(mine, 0o755); // readable by others, writable by none: fine
    checkSocketFolder(join(mine, "s.sock"));
  });
});

describe("the user's own daemon at the default socket", () => {
  test("is found from the environment alone and works", async () => {
    const base = tempDir("def-");
    const state = join(base, "state");
    const env = { SESSIOND_SOCKET: undefined, XDG_RUNTIME_DIR: undefined, SESSIOND_STATE_DIR: state };
    const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
    for (const [k, v] of Object.entries(env)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    let d;
    let store;
    try {
      const want = join(state, "run", "sessiond.sock");
      const def = defaultSocketPath();
      if (def !== want) {
        // A private /run/user/<uid> comes before the state folder.
        assert.match(def, /^\/run\/user\/\d+\/sessiond\/sessiond.sock$/);
        return;
      }
      d = await startDaemon({ dir: base, env, defaultSocket: true, socket: want });
      store = new SessiondStore();
      assert.equal(store.socketPath, want);
      const key = { projectKey: "-p-default", sessionId: uuid() };
      const entries = [userEntry(key.sessionId, "hello")];
      await store.append(key, entries);
      assert.deepEqual(await store.load(key), entries);
      assert.deepEqual((await store.listSessions("-p-default")).map((s) => s.sessionId), [key.sessionId]);
    } finally {
      store?.close();
      await d?.stop();
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });
});
