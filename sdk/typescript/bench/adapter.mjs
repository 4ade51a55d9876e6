// Benchmark of the TypeScript SessionStore adapter (dist/, built with
// `npm run build`), run by `make bench-adapter` (and `make bench`):
//
//   1. appends through SessiondStore against the Go client
//      (bin/sessiond-bench --socket ... --batch N), one session, 1 KiB
//      entries, one entry per call (the SDK's eager mode) and 50 per call
//      (its batched mode, a turn at a time);
//   2. the official SDK's listSessions({ dir, sessionStore }) over 1,000
//      sessions, against sessiond's ListSessions over gRPC from the same
//      node process, and against the SDK's fallback for a store without
//      listSessionSummaries (one load() per session).
//
// Everything runs against one sessiond the script starts in a temp folder
// and stops with SIGTERM; the baselines are measured in the same run,
// interleaved with what they are compared with. It prints a markdown report
// and, with --markdown FILE, writes it into the "SessionStore adapter"
// section of that file. Figures are reported, never asserted: the exit
// status is non-zero only when something failed or did not verify.
//
//   node sdk/typescript/bench/adapter.mjs --sessiond bin/sessiond --bench bin/sessiond-bench [--markdown BENCHMARKS.md]

import { execFileSync, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, renameSync, writeFileSync } from "node:fs";
import { cpus, release } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import { credentials, Metadata } from "@grpc/grpc-js";
import { listSessions } from "@anthropic-ai/claude-agent-sdk";

import { SessiondStore } from "../dist/index.js";
import { SessiondClient } from "../dist/gen/sessiond/v1/sessiond.js";

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(here, "../../..");

const { values: args } = parseArgs({
  options: {
    sessiond: { type: "string" },
    bench: { type: "string" },
    markdown: { type: "string" },
    entries: { type: "string", default: "2000" },
    batch: { type: "string", default: "50" },
    "batch-calls": { type: "string", default: "200" },
    rounds: { type: "string", default: "5" },
    sessions: { type: "string", default: "1000" },
    runs: { type: "string", default: "7" },
    "fallback-runs": { type: "string", default: "5" },
    keep: { type: "boolean", default: false },
  },
});
if (!args.sessiond || !args.bench) {
  console.error("usage: node sdk/typescript/bench/adapter.mjs --sessiond bin/sessiond --bench bin/sessiond-bench [--markdown BENCHMARKS.md]");
  process.exit(2);
}
const SESSIOND = resolve(args.sessiond);
const BENCH = resolve(args.bench);
const ENTRIES = int(args.entries);
const BATCH = int(args.batch);
const BATCH_ENTRIES = int(args["batch-calls"]) * BATCH;
const ROUNDS = int(args.rounds);
const SESSIONS = int(args.sessions);
const RUNS = int(args.runs);
const FALLBACK_RUNS = int(args["fallback-runs"]);
const ENTRY_BYTES = 1024;

// Targets of the issue for the listing (none is given for the appends).
const LIST_VS_DAEMON_MAX = 2; // SDK + store within 2x of sessiond's ListSessions
const LIST_VS_FALLBACK_MIN = 10; // summary path at least 10x faster than one load() per session

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

function int(s) {
  const n = Number.parseInt(s, 10);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`not a positive integer: ${s}`);
  return n;
}

const log = (...a) => console.error("[bench-adapter]", ...a);
const problems = []; // failures and verification errors: non-zero exit

// ---------- the daemon ----------

// Short paths: a Unix socket path must stay under 108 bytes.
const work = mkdtempSync("/tmp/sdab-");
let daemonChild;
process.on("exit", () => {
  // A normal run has stopped the daemon with SIGTERM already. On a failure
  // it is killed outright (nothing in it is kept), before its folder goes.
  if (daemonChild && daemonChild.exitCode === null && daemonChild.signalCode === null) daemonChild.kill("SIGKILL");
  if (!args.keep) rmSync(work, { recursive: true, force: true });
});
const daemon = await startDaemon(work);

async function startDaemon(dir) {
  const sock = join(dir, "run", "s.sock");
  const root = join(dir, "claude");
  const argv = ["--socket", sock, "--root", root, "--state-dir", join(dir, "state")];
  const child = spawn(SESSIOND, argv, { stdio: ["ignore", "ignore", "pipe"] });
  daemonChild = child;
  let stderr = "";
  child.stderr.on("data", (b) => {
    stderr += b.toString();
    if (stderr.length > 1 << 20) stderr = stderr.slice(-(1 << 19));
  });
  const exited = new Promise((r) => child.once("exit", (code, signal) => r({ code, signal })));
  const d = { sock, root, pid: child.pid, child, exited, log: () => stderr };
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`sessiond exited (${child.exitCode}):\n${stderr}`);
    if (existsSync(sock)) {
      const c = rawClient(sock);
      const ok = await call(c, "status", {}).then(
        () => true,
        () => false,
      );
      c.close();
      if (ok) return d;
    }
    if (Date.now() > deadline) {
      child.kill("SIGTERM");
      throw new Error(`sessiond did not answer on ${sock} within 30 s:\n${stderr}`);
    }
    await sleep(50);
  }
}

async function stopDaemon(d) {
  if (d.child.exitCode !== null || d.child.signalCode !== null) return d.exited;
  d.child.kill("SIGTERM");
  const t = setTimeout(() => d.child.kill("SIGKILL"), 60_000);
  const r = await d.exited;
  clearTimeout(t);
  return r;
}

function rawClient(sock) {
  return new SessiondClient(`unix:${sock}`, credentials.createInsecure(), {
    "grpc.max_receive_message_length": -1,
    "grpc.max_send_message_length": -1,
  });
}

function call(client, method, req) {
  return new Promise((res, rej) => client[method](req, new Metadata(), { deadline: Date.now() + 120_000 }, (err, resp) => (err ? rej(err) : res(resp))));
}

/** stream calls a server-streaming method (Flush, ListSessions: answered in pages) and resolves with its messages. */
function stream(client, method, req) {
  return new Promise((res, rej) => {
    const out = [];
    const s = client[method](req, new Metadata(), { deadline: Date.now() + 120_000 });
    s.on("data", (m) => out.push(m));
    s.on("error", rej);
    s.on("status", (st) => {
      if (st.code === 0) res(out);
    });
  });
}

/** utime + stime of a process, in ms (from /proc/<pid>/stat). */
function procCPUms(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const tick = 100; // USER_HZ on Linux
  return ((Number(f[11]) + Number(f[12])) * 1000) / tick;
}

const raw = rawClient(daemon.sock);
const ref = (projectKey, sessionId) => ({ projectKey, sessionId, subpath: "" });
const agentConfigDir = join(work, "agent"); // the agent's own config dir (never sessiond's root)
mkdirSync(agentConfigDir, { recursive: true });

// ---------- entries ----------

const FILLER = "The quick brown fox jumps over the lazy dog; tool output follows. 0123456789 ".repeat(64);

/**
 * An entry of the same shape and size as sessiond-bench's (internal/bench
 * appendEntry): user and assistant messages in turn, whose JSON line is
 * exactly ENTRY_BYTES bytes.
 */
function benchEntry(sessionId, seq) {
  const role = seq % 2 === 0 ? "user" : "assistant";
  const e = { type: role, uuid: randomUUID(), sessionId, seq, message: { role, content: "" } };
  const pad = ENTRY_BYTES - Buffer.byteLength(JSON.stringify(e));
  e.message.content = FILLER.slice(0, pad);
  return e;
}

// ---------- statistics ----------

function pct(sorted, q) {
  const i = Math.max(0, Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}
function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}
const nowNs = () => process.hrtime.bigint();
const usSince = (t0) => Number(nowNs() - t0) / 1e3;

// ---------- 1. appends ----------

/** One measured run of appends through the adapter (or a raw grpc-js client). */
async function nodeAppendRun(kind, perCall, total) {
  const projectKey = `-sessiond-adapter-bench-${kind}`;
  const sessionId = randomUUID();
  const key = { projectKey, sessionId };
  const store = kind === "raw" ? undefined : new SessiondStore({ socketPath: daemon.sock, agentConfigDir });
  const client = kind === "raw" ? rawClient(daemon.sock) : undefined;
  const send = (entries) =>
    store
      ? store.append(key, entries)
      : call(client, "append", {
          session: ref(projectKey, sessionId),
          entries: entries.map((e) => Buffer.from(JSON.stringify(e))),
          batchId: "",
          summary: undefined,
          agentConfigDir: "",
          entriesText: [],
        });
  let seq = 0;
  // Warm-up, untimed, as sessiond-bench does: one append (connection,
  // session and file creation; the adapter's first fold asks for the
  // summary).
  await send([benchEntry(sessionId, seq++)]);
  const calls = [];
  for (let done = 0; done < total; done += perCall) {
    const n = Math.min(perCall, total - done);
    const batch = [];
    for (let i = 0; i < n; i++) batch.push(benchEntry(sessionId, seq++));
    calls.push(batch);
  }
  const lat = [];
  const cpu0 = procCPUms(daemon.pid);
  const t0 = nowNs();
  for (const batch of calls) {
    const t = nowNs();
    await send(batch);
    lat.push(usSince(t));
  }
  const seconds = usSince(t0) / 1e6;
  const daemonCPU = procCPUms(daemon.pid) - cpu0;
  // Verify, then remove, as sessiond-bench does with its sessions.
  await stream(raw, "flush", { session: ref(projectKey, sessionId), all: false });
  const info = await call(raw, "getSession", { session: ref(projectKey, sessionId) });
  const verified = Number(info.entries) === total + 1 && Number(info.pendingEntries) === 0;
  await call(raw, "delete", { session: ref(projectKey, sessionId), purge: true });
  store?.close();
  client?.close();
  lat.sort((a, b) => a - b);
  return { entries: total, calls: calls.length, seconds, eps: total / seconds, p50: pct(lat, 0.5), p99: pct(lat, 0.99), daemonCPUms: daemonCPU, verified };
}

/** One run of sessiond-bench against the same daemon. */
function goAppendRun(perCall, total, unary) {
  const argv = ["--socket", daemon.sock, "--target", "daemon", "--clients", "1", "--sessions", "1", "--size", "1KiB",
    "--entries", String(total), "--baselines=false", "--verify", "--json"];
  if (perCall > 1) argv.push("--batch", String(perCall));
  if (unary) argv.push("--unary");
  const out = execFileSync(BENCH, argv, { cwd: repoRoot, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 64 << 20 });
  const rep = JSON.parse(out);
  const r = rep.scenarios[0].results.at(-1);
  if (r.error) throw new Error(`sessiond-bench: ${r.error}`);
  const calls = perCall > 1 ? Math.ceil(total / perCall) : total;
  return { entries: r.entries, calls, seconds: r.seconds, eps: r.entries_per_sec, p50: r.latency.p50_us, p99: r.latency.p99_us,
    daemonCPUms: (r.cpu_seconds ?? 0) * 1000, verified: r.verified };
}

const appendRows = [
  { id: "tsE", shape: "eager", label: "adapter eager: SessiondStore.append, 1 entry per call", run: () => nodeAppendRun("store", 1, ENTRIES) },
  { id: "goE", shape: "eager", label: "Go client: client.Append, 1 entry per call (AppendStream)", run: () => goAppendRun(1, ENTRIES, false) },
  { id: "goEu", shape: "eager", info: true, label: "Go client, unary Append, 1 entry per call (info)", run: () => goAppendRun(1, ENTRIES, true) },
  { id: "rawE", shape: "eager", info: true, label: "node grpc-js unary Append, no adapter, 1 entry per call (info)", run: () => nodeAppendRun("raw", 1, ENTRIES) },
  { id: "tsB", shape: "batched", label: `adapter batched: SessiondStore.append, ${BATCH} entries per call`, run: () => nodeAppendRun("store", BATCH, BATCH_ENTRIES) },
  { id: "goB", shape: "batched", label: `Go client: client.Append, ${BATCH} entries per call (AppendStream)`, run: () => goAppendRun(BATCH, BATCH_ENTRIES, false) },
  { id: "goBu", shape: "batched", info: true, label: `Go client, unary Append, ${BATCH} entries per call (info)`, run: () => goAppendRun(BATCH, BATCH_ENTRIES, true) },
  { id: "rawB", shape: "batched", info: true, label: `node grpc-js unary Append, no adapter, ${BATCH} entries per call (info)`, run: () => nodeAppendRun("raw", BATCH, BATCH_ENTRIES) },
];

log(`sessiond ${SESSIOND} pid ${daemon.pid} on ${work}`);
// JIT and channel warm-up of the node side, untimed, on a session of its own.
{
  const store = new SessiondStore({ socketPath: daemon.sock, agentConfigDir });
  const key = { projectKey: "-sessiond-adapter-bench-warmup", sessionId: randomUUID() };
  for (let i = 0; i < 300; i++) await store.append(key, [benchEntry(key.sessionId, i)]);
  for (let i = 0; i < 20; i++) await store.append(key, Array.from({ length: BATCH }, (_, j) => benchEntry(key.sessionId, 300 + i * BATCH + j)));
  await call(raw, "delete", { session: ref(key.projectKey, key.sessionId), purge: true });
  store.close();
}
const appendRuns = Object.fromEntries(appendRows.map((r) => [r.id, []]));
for (let round = 1; round <= ROUNDS; round++) {
  for (const row of appendRows) {
    try {
      const r = await row.run();
      appendRuns[row.id].push(r);
      if (r.verified === false) problems.push(`${row.label}: the session does not hold every acknowledged entry`);
      log(`round ${round} ${row.label}: ${r.eps.toFixed(0)} entries/s, p50 ${r.p50.toFixed(0)} us, p99 ${r.p99.toFixed(0)} us`);
    } catch (err) {
      problems.push(`${row.label}: ${err.message ?? err}`);
      log(`round ${round} ${row.label}: FAILED: ${err.message ?? err}`);
    }
  }
}
const appendStats = {};
for (const row of appendRows) {
  const rs = appendRuns[row.id];
  if (rs.length === 0) continue;
  appendStats[row.id] = {
    eps: median(rs.map((r) => r.eps)),
    p50: median(rs.map((r) => r.p50)),
    p99: median(rs.map((r) => r.p99)),
    daemonCPUus: median(rs.map((r) => (r.daemonCPUms * 1000) / r.calls)),
    entries: rs[0].entries,
    calls: rs[0].calls,
    runs: rs.length,
    allEps: rs.map((r) => r.eps),
    verified: rs.every((r) => r.verified === true),
  };
}

// ---------- 2. listing ----------

const projectDir = realpathSync(mkdtempSync(join(work, "project-")));
const projectKey = projectDir.replace(/[^A-Za-z0-9]/g, "-");

/** A few entries as the CLI writes them, in two turns (two appends). */
function sessionTurns(sessionId, i) {
  const base = { isSidechain: false, userType: "external", cwd: projectDir, sessionId, version: "2.1.0", gitBranch: i % 3 === 0 ? "main" : `feature/${i % 17}` };
  const t = Date.now() - (SESSIONS - i) * 60_000;
  const at = (k) => new Date(t + k * 1000).toISOString();
  const u1 = randomUUID(), a1 = randomUUID(), u2 = randomUUID(), a2 = randomUUID();
  const tool = "toolu_" + randomUUID().replace(/-/g, "");
  const turn1 = [
    { ...base, parentUuid: null, type: "user", message: { role: "user", content: `Session ${i}: look at the failing test in pkg/${i % 40}/handler_test.go and tell me why it fails` }, uuid: u1, timestamp: at(0) },
    { ...base, parentUuid: u1, type: "assistant", message: { role: "assistant", id: "msg_" + randomUUID(), type: "message", model: "claude-sonnet-4-5", content: [{ type: "text", text: "I'll read the test first." }, { type: "tool_use", id: tool, name: "Read", input: { file_path: `${projectDir}/pkg/${i % 40}/handler_test.go` } }], stop_reason: "tool_use", usage: { input_tokens: 1200, output_tokens: 60 } }, requestId: "req_" + randomUUID(), uuid: a1, timestamp: at(2) },
  ];
  const turn2 = [
    { ...base, parentUuid: a1, type: "user", message: { role: "user", content: [{ type: "tool_result", tool_use_id: tool, content: "package handler\n\nfunc TestServe(t *testing.T) {\n\t// ...\n}\n".repeat(8) }] }, uuid: u2, timestamp: at(3), toolUseResult: { type: "text", file: { filePath: `${projectDir}/pkg/${i % 40}/handler_test.go`, numLines: 40 } } },
    { ...base, parentUuid: u2, type: "assistant", message: { role: "assistant", id: "msg_" + randomUUID(), type: "message", model: "claude-sonnet-4-5", content: [{ type: "text", text: "The test expects a 404 for an unknown route, but the handler answers 500 because the router's fallback is never set." }], stop_reason: "end_turn", usage: { input_tokens: 1900, output_tokens: 90 } }, requestId: "req_" + randomUUID(), uuid: a2, timestamp: at(9) },
  ];
  if (i % 5 === 0) turn2.push({ type: "custom-title", customTitle: `Fix handler test ${i}`, sessionId });
  if (i % 7 === 0) turn2.push({ type: "ai-title", aiTitle: `Handler returns 500 on unknown route (${i})`, sessionId });
  return [turn1, turn2];
}

log(`listing: writing ${SESSIONS} sessions into ${projectKey} through the adapter`);
const sessionIds = [];
let writtenEntries = 0;
let writtenBytes = 0;
{
  const store = new SessiondStore({ socketPath: daemon.sock, agentConfigDir });
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= SESSIONS) return;
      const sid = randomUUID();
      sessionIds.push(sid);
      for (const turn of sessionTurns(sid, i)) {
        await store.append({ projectKey, sessionId: sid }, turn);
        writtenEntries += turn.length;
        for (const e of turn) writtenBytes += Buffer.byteLength(JSON.stringify(e)) + 1;
      }
    }
  };
  const t0 = nowNs();
  await Promise.all(Array.from({ length: 8 }, worker));
  log(`listing: written in ${(usSince(t0) / 1e6).toFixed(1)} s`);
  store.close();
  // Every journal into its transcript, so that no background compaction
  // runs while the listings are timed.
  await stream(raw, "flush", { session: undefined, all: true });
}

const lister = new SessiondStore({ socketPath: daemon.sock, agentConfigDir });
// The store as a SessionStore without listSessionSummaries: the SDK then
// lists with listSessions() and one load() per session.
const bare = {
  append: (k, e) => lister.append(k, e),
  load: (k) => lister.load(k),
  listSessions: (p) => lister.listSessions(p),
  delete: (k) => lister.delete(k),
  listSubkeys: (k) => lister.listSubkeys(k),
};
const listRaw = rawClient(daemon.sock);

const listings = [
  { id: "sdk", label: "SDK listSessions({ dir, sessionStore: SessiondStore }) (summaries: ListSummaries + ListSessions)", runs: RUNS, run: () => listSessions({ dir: projectDir, sessionStore: lister }) },
  { id: "daemon", label: "sessiond ListSessions over gRPC, from node (grpc-js, the same process)", runs: RUNS, run: async () => (await stream(listRaw, "listSessions", { projectKey, limit: 0, offset: 0, continue: false, excludeArchived: false })).flatMap((p) => p.sessions) },
  { id: "sums", info: true, label: "its first call alone: SessiondStore.listSessionSummaries (ListSummaries; info)", runs: RUNS, run: () => lister.listSessionSummaries(projectKey) },
  { id: "ids", info: true, label: "its second call alone: SessiondStore.listSessions (ListSessions; info)", runs: RUNS, run: () => lister.listSessions(projectKey) },
  { id: "fallback", label: "SDK listSessions({ dir, sessionStore }) without listSessionSummaries (ListSessions + one load() per session)", runs: FALLBACK_RUNS, run: () => listSessions({ dir: projectDir, sessionStore: bare }) },
];

// Verification, untimed: each lists every session; the summary path loads
// no transcript; both SDK paths show the same sessions alike.
const listChecks = [];
{
  let loads = 0;
  const counting = {
    append: (k, e) => lister.append(k, e),
    load: (k) => {
      loads++;
      return lister.load(k);
    },
    listSessions: (p) => lister.listSessions(p),
    listSessionSummaries: (p) => lister.listSessionSummaries(p),
    delete: (k) => lister.delete(k),
    listSubkeys: (k) => lister.listSubkeys(k),
  };
  const viaSummaries = await listSessions({ dir: projectDir, sessionStore: counting });
  const viaLoads = await listings.find((l) => l.id === "fallback").run();
  const viaDaemon = await listings.find((l) => l.id === "daemon").run();
  const want = new Set(sessionIds);
  for (const [name, list] of [["SDK with summaries", viaSummaries], ["SDK without summaries", viaLoads], ["sessiond ListSessions", viaDaemon.map((s) => ({ sessionId: s.session.sessionId }))]]) {
    const got = new Set(list.map((s) => s.sessionId));
    const ok = got.size === want.size && [...want].every((s) => got.has(s));
    listChecks.push(`${name}: ${list.length} sessions${ok ? ", every one written" : ", NOT the sessions written"}`);
    if (!ok) problems.push(`listing: ${name} lists ${list.length} sessions, not the ${want.size} written`);
  }
  listChecks.push(`the summary path called load() ${loads} times`);
  if (loads > 0) problems.push(`listing: the summary path fell back to load() for ${loads} sessions`);
  const byId = new Map(viaLoads.map((s) => [s.sessionId, s]));
  const fields = ["summary", "customTitle", "firstPrompt", "gitBranch", "cwd", "tag", "createdAt"];
  let differ = 0;
  let example = "";
  for (const s of viaSummaries) {
    const o = byId.get(s.sessionId);
    const bad = fields.filter((f) => o === undefined || s[f] !== o[f]);
    if (bad.length > 0) {
      differ++;
      if (!example) example = `${s.sessionId}: ${bad.map((f) => `${f} ${JSON.stringify(s[f])} vs ${JSON.stringify(o?.[f])}`).join(", ")}`;
    }
  }
  listChecks.push(differ === 0 ? `the two SDK paths agree on ${fields.join(", ")} for every session` : `the two SDK paths differ for ${differ} sessions (e.g. ${example})`);
  if (differ > 0) problems.push(`listing: the SDK's summary path and its load() path differ for ${differ} sessions`);
}

// Warm-up (one call of each, untimed), then rounds, interleaved.
for (const l of listings) await l.run();
const listRuns = Object.fromEntries(listings.map((l) => [l.id, []]));
for (let round = 0; round < Math.max(...listings.map((l) => l.runs)); round++) {
  for (const l of listings) {
    if (round >= l.runs) continue;
    const cpu0 = process.cpuUsage();
    const d0 = procCPUms(daemon.pid);
    const t0 = nowNs();
    const out = await l.run();
    const ms = usSince(t0) / 1e3;
    const cu = process.cpuUsage(cpu0);
    listRuns[l.id].push({ ms, nodeCPUms: (cu.user + cu.system) / 1e3, daemonCPUms: procCPUms(daemon.pid) - d0, n: out.length });
    log(`listing ${l.id}: ${ms.toFixed(1)} ms (${out.length} sessions)`);
  }
}
const listStats = {};
for (const l of listings) {
  const rs = listRuns[l.id];
  listStats[l.id] = {
    ms: median(rs.map((r) => r.ms)),
    all: rs.map((r) => r.ms),
    // Means: /proc counts sessiond's CPU in ticks of 10 ms.
    nodeCPUms: rs.reduce((a, r) => a + r.nodeCPUms, 0) / rs.length,
    daemonCPUms: rs.reduce((a, r) => a + r.daemonCPUms, 0) / rs.length,
    n: rs[0]?.n,
  };
}

lister.close();
listRaw.close();
raw.close();
const stopped = await stopDaemon(daemon);
if (stopped.code !== 0) problems.push(`sessiond exited with ${stopped.code ?? stopped.signal} after SIGTERM`);

// ---------- report ----------

const sdkVersion = JSON.parse(readFileSync(join(here, "../node_modules/@anthropic-ai/claude-agent-sdk/package.json"), "utf8")).version;
const f0 = (x) => (x === undefined ? "-" : x.toLocaleString("en-US", { maximumFractionDigits: 0 }));
const f1 = (x) => (x === undefined ? "-" : x.toFixed(1));
const ratio = (x) => (x >= 10 ? `${x.toFixed(0)}x` : `${x.toFixed(2)}x`);

function report() {
  const L = [];
  const date = new Date().toISOString().replace(/\.\d+Z$/, "Z");
  L.push(`Run of ${date}, commit \`${commit()}\`: ${cpus().length} CPUs (${cpus()[0]?.model?.trim() ?? "?"}), kernel ${release()}, node ${process.version}, @anthropic-ai/claude-agent-sdk ${sdkVersion}; sessiond started by the script on a temp folder under /tmp. Figures vary from run to run (shared virtual CPUs, a noisy disk): compare the ratios of one run, not figures across runs.`);
  L.push("");
  L.push("```sh");
  L.push("make bench-adapter    # node sdk/typescript/bench/adapter.mjs --sessiond bin/sessiond --bench bin/sessiond-bench --markdown BENCHMARKS.md");
  L.push("```");
  L.push("");
  const S = listStats;
  const vsDaemon = S.sdk.ms / S.daemon.ms;
  const vsFallback = S.fallback.ms / S.sdk.ms;
  L.push("| target | measured | limit | verdict |");
  L.push("|---|---|---|---|");
  L.push(`| listing ${SESSIONS} sessions: SDK + SessiondStore within 2x of sessiond's ListSessions | ${ratio(vsDaemon)} (${f1(S.sdk.ms)} ms vs ${f1(S.daemon.ms)} ms, medians) | ≤ ${LIST_VS_DAEMON_MAX}x | ${vsDaemon <= LIST_VS_DAEMON_MAX ? "PASS" : "**FAIL**"} |`);
  L.push(`| listing ${SESSIONS} sessions: summary path at least 10x faster than one load() per session | ${ratio(vsFallback)} (${f1(S.fallback.ms)} ms vs ${f1(S.sdk.ms)} ms, medians) | ≥ ${LIST_VS_FALLBACK_MIN}x | ${vsFallback >= LIST_VS_FALLBACK_MIN ? "PASS" : "**FAIL**"} |`);
  const A = appendStats;
  for (const [shape, ts, go] of [["eager", "tsE", "goE"], ["batched", "tsB", "goB"]]) {
    if (A[ts] && A[go]) {
      L.push(`| appends, ${shape}: adapter / Go client (no target) | entries/s ${ratio(A[ts].eps / A[go].eps)}, p50 ${ratio(A[ts].p50 / A[go].p50)}, p99 ${ratio(A[ts].p99 / A[go].p99)} | - | info |`);
    }
  }
  L.push("");
  L.push(`### Appends: one session, 1 KiB entries, one call after the other`);
  L.push("");
  L.push("| run | entries | calls | entries/s | p50 µs/call | p99 µs/call | sessiond CPU µs/call | entries/s / Go | p50 / Go | verified |");
  L.push("|---|---|---|---|---|---|---|---|---|---|");
  for (const row of appendRows) {
    const a = A[row.id];
    if (!a) {
      L.push(`| ${row.label} | failed | | | | | | | | |`);
      continue;
    }
    const go = A[row.shape === "eager" ? "goE" : "goB"];
    const label = row.id.startsWith("ts") ? `**${row.label}**` : row.label;
    L.push(`| ${label} | ${f0(a.entries)} | ${f0(a.calls)} | ${f0(a.eps)} | ${f0(a.p50)} | ${f0(a.p99)} | ${f0(a.daemonCPUus)} | ${go ? ratio(a.eps / go.eps) : "-"} | ${go ? ratio(a.p50 / go.p50) : "-"} | ${a.verified ? "yes" : "NO"} |`);
  }
  L.push("");
  L.push(`- Each row: the median over ${ROUNDS} rounds of entries/s, of p50 and of p99 (each its own median); the rows run interleaved, round after round, against the same sessiond. entries/s of each round: ${appendRows.filter((r) => A[r.id]).map((r) => `${r.id} ${A[r.id].allEps.map((x) => x.toFixed(0)).join("/")}`).join("; ")}.`);
  L.push(`- Latency is per call, as the caller sees it. Each run writes one new session after one untimed append (connection, session, file, and for the adapter its first summary lookup); the node side was warmed up before (300 + 20 untimed appends). Entries are sessiond-bench's (same shape, 1024-byte lines); the adapter gets them as objects and serialises them (JSON.stringify) in the call, the Go client gets the bytes.`);
  L.push(`- The adapter's append is a unary Append carrying the batch, a batch id (a SHA-256 of the batch and a UUID), the agent's config dir and the session's summary folded with the SDK's foldSessionSummary (stored by sessiond under compare-and-swap, with the batch). The Go client sends only the entries, on its pooled AppendStream streams; "unary Append" rows are the Go client with client.WithUnaryAppend (sessiond-bench --unary); the "node grpc-js" rows send the same entries from node with the generated client and nothing else (no summary, no batch id).`);
  L.push(`- sessiond CPU: utime+stime of the daemon over the run, per call. Each run is verified: the session holds every acknowledged entry (sessiond-bench --verify; for node, GetSession's entry count after a Flush); then it is purged.`);
  L.push("");
  L.push(`### Listing ${SESSIONS} sessions of one project`);
  L.push("");
  L.push("| listing | median ms | runs (ms) | node CPU ms/call | sessiond CPU ms/call | / sessiond ListSessions |");
  L.push("|---|---|---|---|---|---|");
  for (const l of listings) {
    const s = S[l.id];
    const label = l.info ? `&nbsp;&nbsp;${l.label}` : `**${l.label}**`;
    L.push(`| ${label} | ${f1(s.ms)} | ${s.all.map((x) => x.toFixed(1)).join(", ")} | ${f1(s.nodeCPUms)} | ${f1(s.daemonCPUms)} | ${ratio(s.ms / S.daemon.ms)} |`);
  }
  L.push("");
  L.push(`- ${SESSIONS} sessions written through SessiondStore into one project (a temp folder, the listings' \`dir\`), each in two appends (two turns): a user prompt, an assistant answer with a Read tool_use, its tool_result, the answer; 1 in 5 with a custom-title, 1 in 7 with an ai-title (${(writtenEntries / SESSIONS).toFixed(1)} entries and ${(writtenBytes / SESSIONS / 1024).toFixed(1)} KiB per session on average); then Flush of every session, so no compaction runs during the listings.`);
  L.push(`- Baseline: sessiond's ListSessions for the project over gRPC from node (the adapter's generated client, grpc-js), in the same process as the SDK: the same runtime and gRPC library as the SDK path, so the ratio is what the SDK and the summaries add (a second call, ListSummaries, parsing each summary's JSON, the SDK's merge and sort), not a difference between Go and node. It returns sessiond's own listing of each session (title, first prompt, cwd, branch, size, ...).`);
  L.push(`- Each listing returns all ${SESSIONS} sessions (no limit). One untimed call of each first, then rounds interleaved; the fallback runs ${FALLBACK_RUNS} times, the others ${RUNS}. CPU columns: the node process (process.cpuUsage) and sessiond (utime+stime from /proc, in 10 ms ticks) over the calls, mean per call. The two info rows are the SDK path's two store calls timed alone: what is left of its time is the SDK's own work (merging, sorting, building each session's info from its summary).`);
  L.push(`- Verified, before timing: ${listChecks.join("; ")}.`);
  if (problems.length > 0) {
    L.push("");
    L.push(`**Problems in this run:** ${problems.join("; ")}.`);
  }
  return L.join("\n") + "\n";
}

// commit names the commit measured; "+uncommitted changes" when what the
// measured programs are built from differs from it.
function commit() {
  try {
    let c = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: repoRoot, encoding: "utf8" }).trim();
    const dirty = execFileSync("git", ["status", "--porcelain", "--", "cmd/sessiond", "cmd/sessiond-bench", "internal", "client", "api", "go.mod", "go.sum", "sdk/typescript/src", "sdk/typescript/bench"], { cwd: repoRoot, encoding: "utf8" }).trim();
    if (dirty) c += "+uncommitted changes";
    return c;
  } catch {
    return "-";
  }
}

const md = report();
process.stdout.write("\n" + md);

const BEGIN = "<!-- bench:adapter:begin (written by sdk/typescript/bench/adapter.mjs --markdown; edits here are lost) -->";
const END = "<!-- bench:adapter:end -->";
if (args.markdown && problems.length === 0) {
  const path = resolve(args.markdown);
  const old = readFileSync(path, "utf8");
  const i = old.indexOf(BEGIN);
  const j = old.indexOf(END);
  let next;
  if (i >= 0 && j > i) {
    next = old.slice(0, i) + BEGIN + "\n\n" + md + "\n" + old.slice(j);
  } else {
    // First run: a new section before the hand-written reading of the results.
    const section = `## SessionStore adapter\n\n${BEGIN}\n\n${md}\n${END}\n\n`;
    const at = old.indexOf("\n## Reading the results");
    next = at >= 0 ? old.slice(0, at + 1) + section + old.slice(at + 1) : old + "\n" + section;
  }
  writeFileSync(path + ".tmp", next);
  renameSync(path + ".tmp", path);
  log(`wrote the results into ${path}`);
}
if (problems.length > 0) {
  console.error("bench-adapter: " + problems.join("\n  "));
  process.exit(1);
}
