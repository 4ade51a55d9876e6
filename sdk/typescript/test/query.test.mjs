// End to end: query() with the real Claude Code CLI (the SDK's bundled
// binary), a fake Messages API on localhost, and a SessiondStore. The CLI
// mirrors its transcript to sessiond; a second query() resumes from it.

import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { createServer } from "node:http";
import { join } from "node:path";
import { isDeepStrictEqual } from "node:util";
import { after, before, describe, test } from "node:test";

import { getSessionMessages, listSessions, query } from "@anthropic-ai/claude-agent-sdk";

import { SessiondStore } from "../dist/index.js";
import { rawClient, startDaemon, stream, tempDir } from "./helpers.mjs";

const require = createRequire(import.meta.url);
let cli;
try {
  cli = require.resolve(`@anthropic-ai/claude-agent-sdk-${process.platform}-${process.arch}/claude`);
} catch {
  cli = undefined;
}

/** A Messages API that answers every request with one short text, streamed or not. */
async function fakeApi() {
  const requests = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      if (req.method !== "POST" || !req.url.startsWith("/v1/messages") || req.url.includes("count_tokens")) {
        res.writeHead(404, { "content-type": "application/json" });
        res.end(JSON.stringify({ type: "error", error: { type: "not_found_error", message: "not in the fake" } }));
        return;
      }
      const j = JSON.parse(body);
      requests.push(j);
      const text = `fake answer ${requests.length}`;
      const usage = { input_tokens: 10, output_tokens: 5 };
      if (!j.stream) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ id: `msg_${requests.length}`, type: "message", role: "assistant", model: j.model, content: [{ type: "text", text }], stop_reason: "end_turn", stop_sequence: null, usage }));
        return;
      }
      res.writeHead(200, { "content-type": "text/event-stream" });
      const send = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
      send("message_start", { message: { id: `msg_${requests.length}`, type: "message", role: "assistant", model: j.model, content: [], stop_reason: null, stop_sequence: null, usage } });
      send("content_block_start", { index: 0, content_block: { type: "text", text: "" } });
      send("content_block_delta", { index: 0, delta: { type: "text_delta", text } });
      send("content_block_stop", { index: 0 });
      send("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 5 } });
      send("message_stop", {});
      res.end();
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${server.address().port}`, requests, close: () => new Promise((r) => server.close(r)) };
}

describe("query() mirrored to sessiond", { skip: cli === undefined && "the SDK's CLI binary for this platform is not installed" }, () => {
  let daemon;
  let api;
  let store;
  const saved = {};
  const setEnv = (vars) => {
    for (const [k, v] of Object.entries(vars)) {
      if (!(k in saved)) saved[k] = process.env[k];
      process.env[k] = v;
    }
  };

  before(async () => {
    daemon = await startDaemon();
    api = await fakeApi();
    store = new SessiondStore({ socketPath: daemon.socket });
    // The agent's own scratch config dir, not sessiond's root; in
    // process.env, so that the CLI and the adapter both see it.
    setEnv({
      CLAUDE_CONFIG_DIR: tempDir("agent-cfg-"),
      ANTHROPIC_BASE_URL: api.url,
      ANTHROPIC_API_KEY: "sk-ant-test-not-a-key",
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
      DISABLE_AUTOUPDATER: "1",
    });
  });

  after(async () => {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    store?.close();
    await api?.close();
    await daemon?.stop();
  });

  async function run(prompt, options) {
    const out = [];
    for await (const m of query({ prompt, options: { maxTurns: 1, sessionStore: store, ...options } })) out.push(m);
    const result = out.find((m) => m.type === "result");
    assert.equal(result?.subtype, "success", JSON.stringify(out.filter((m) => m.type === "system" || m.type === "result")));
    assert.deepEqual(out.filter((m) => m.subtype === "mirror_error"), [], "no mirror_error");
    return result.session_id;
  }

  // fileLines are the lines of a transcript file, as text.
  const fileLines = (dir, projectKey, sid) => readFileSync(join(dir, "projects", projectKey, `${sid}.jsonl`), "utf8").split("\n").filter(Boolean);

  test("an agent whose config dir is sessiond's root (both on their defaults) writes through sessiond, each line once", async () => {
    const cwd = tempDir("agent-cwd-");
    const projectKey = cwd.replace(/[^A-Za-z0-9]/g, "-");
    const savedDir = process.env.CLAUDE_CONFIG_DIR;
    process.env.CLAUDE_CONFIG_DIR = daemon.root;
    // What the SDK mirrors of the main transcript, in order.
    const mirrored = [];
    const append = store.append;
    store.append = (key, entries) => {
      if (key.subpath === undefined) mirrored.push(...entries);
      return append.call(store, key, entries);
    };
    try {
      const sid = await run("one turn", { cwd });
      const key = { projectKey, sessionId: sid };
      const flush = async () => {
        const client = rawClient(daemon.socket);
        try {
          await stream(client, "flush", { session: { projectKey, sessionId: sid, subpath: "" }, all: false });
        } catch (err) {
          if (!/nothing|not found|NOT_FOUND/i.test(String(err))) throw err;
        } finally {
          client.close();
        }
      };
      await flush();
      const lines = fileLines(daemon.root, projectKey, sid);
      // The CLI wrote each mirrored entry there first; sessiond added
      // nothing: what is left once each is matched with one line is what
      // the CLI never mirrors.
      assert.ok(mirrored.length > 0, "the SDK mirrored nothing");
      const left = lines.map((l) => JSON.parse(l));
      for (const e of mirrored) {
        const i = left.findIndex((l) => isDeepStrictEqual(l, e));
        assert.ok(i >= 0, `a mirrored entry is not one of the CLI's lines: ${JSON.stringify(e).slice(0, 200)}`);
        left.splice(i, 1);
      }
      assert.deepEqual(left.filter((e) => !String(e.type).startsWith("api-request")), [], "lines besides the CLI's unmirrored ones");
      assert.deepEqual(await store.load(key), lines.map((l) => JSON.parse(l)));

      mirrored.length = 0;
      const again = await run("second prompt", { cwd, resume: sid });
      assert.equal(again, sid);
      await flush();
      const after2 = fileLines(daemon.root, projectKey, sid);
      assert.deepEqual(after2.slice(0, lines.length), lines);
      // Resumed from the store in a temporary config dir: its CLI wrote
      // there, and every line it mirrored is stored.
      assert.deepEqual(after2.slice(lines.length).map((l) => JSON.parse(l)), mirrored);
      const msgs = await getSessionMessages(sid, { dir: cwd });
      assert.deepEqual(msgs.map((m) => m.type), ["user", "assistant", "user", "assistant"]);
      assert.deepEqual((await listSessions({ dir: cwd })).map((x) => x.sessionId), [sid]);
    } finally {
      store.append = append;
      process.env.CLAUDE_CONFIG_DIR = savedDir;
    }
  });

  test("a session is mirrored, resumed from sessiond, and listed", async () => {
    const cwd = tempDir("agent-cwd-");
    const projectKey = cwd.replace(/[^A-Za-z0-9]/g, "-");
    const sid = await run("hello from the test", { cwd });
    const firstAnswer = `fake answer ${api.requests.length}`;
    const key = { projectKey, sessionId: sid };

    // What the CLI wrote locally (its api-request records are never
    // mirrored) is what sessiond holds.
    const local = readFileSync(join(process.env.CLAUDE_CONFIG_DIR, "projects", projectKey, `${sid}.jsonl`), "utf8")
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l))
      .filter((e) => !String(e.type).startsWith("api-request"));
    const stored = await store.load(key);
    assert.deepEqual(stored, local);

    // Resume from the store: the model sees the first turn again.
    const again = await run("second prompt", { cwd, resume: sid });
    assert.equal(again, sid);
    const last = JSON.stringify(api.requests.at(-1).messages);
    assert.ok(last.includes("hello from the test") && last.includes(firstAnswer), "the resumed request holds the first turn");
    const after2 = await store.load(key);
    assert.deepEqual(after2.slice(0, stored.length), stored);
    assert.ok(after2.length > stored.length);

    // Listed from the summaries sessiond keeps.
    const sums = await store.listSessionSummaries(projectKey);
    assert.equal(sums.length, 1);
    assert.equal(sums[0].data.firstPrompt, "hello from the test");
    assert.equal(sums[0].data.lastPrompt, "second prompt");
    const listed = await listSessions({ dir: cwd, sessionStore: store });
    assert.deepEqual(listed.map((s) => [s.sessionId, s.summary]), [[sid, "second prompt"]]);

    // And sessiond's canonical file, once the journal is compacted into
    // it, reads as the CLI's own would.
    const client = rawClient(daemon.socket);
    try {
      await stream(client, "flush", { session: { projectKey, sessionId: sid, subpath: "" }, all: false });
    } finally {
      client.close();
    }
    assert.ok(existsSync(join(daemon.root, "projects", projectKey, `${sid}.jsonl`)), "sessiond's canonical file");
    const saved = process.env.CLAUDE_CONFIG_DIR;
    process.env.CLAUDE_CONFIG_DIR = daemon.root;
    try {
      const msgs = await getSessionMessages(sid, { dir: cwd });
      assert.deepEqual(msgs.map((m) => m.type), ["user", "assistant", "user", "assistant"]);
    } finally {
      process.env.CLAUDE_CONFIG_DIR = saved;
    }
  });
});
