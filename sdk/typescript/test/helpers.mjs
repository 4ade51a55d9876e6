// Test helpers: a real sessiond, built from the repository (or taken from
// SESSIOND_BIN), started in a temporary folder and stopped with SIGTERM.

import { execFileSync, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { credentials, Metadata } from "@grpc/grpc-js";

import { SessiondClient } from "../dist/gen/sessiond/v1/sessiond.js";

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, "../../..");

let built;

/** The sessiond binary: $SESSIOND_BIN, else built once per test file from the repository. */
export function sessiondBin() {
  if (process.env.SESSIOND_BIN) return process.env.SESSIOND_BIN;
  if (built === undefined) {
    const dir = mkdtempSync(join(tmpdir(), "sessiond-bin-"));
    built = join(dir, "sessiond");
    execFileSync("go", ["build", "-o", built, "./cmd/sessiond"], { cwd: repoRoot, stdio: ["ignore", "inherit", "inherit"] });
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  }
  return built;
}

/** A temporary folder removed when the process exits. */
export function tempDir(prefix = "sd-") {
  // Short paths: a Unix socket path must stay under 108 bytes.
  const dir = mkdtempSync(join("/tmp", prefix));
  process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * startDaemon runs sessiond with --socket <dir>/run/s.sock --root
 * <dir>/claude --state-dir <dir>/state (or, with defaultSocket, without
 * --socket, so that it picks its default from env) and waits until it
 * answers Status.
 */
export async function startDaemon({ dir = tempDir(), env = {}, defaultSocket = false, socket, args = [] } = {}) {
  const sock = socket ?? join(dir, "run", "s.sock");
  const argv = ["--root", join(dir, "claude"), "--state-dir", join(dir, "state"), "--log-format", "json", ...args];
  if (!defaultSocket) argv.unshift("--socket", sock);
  const childEnv = { ...process.env, ...env };
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete childEnv[k];
  const child = spawn(sessiondBin(), argv, { env: childEnv, stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  child.stderr.on("data", (b) => {
    log += b.toString();
  });
  const exited = new Promise((r) => child.once("exit", (code, signal) => r({ code, signal })));
  const d = {
    dir,
    socket: sock,
    root: join(dir, "claude"),
    child,
    log: () => log,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      child.kill("SIGTERM");
      return exited;
    },
  };
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`sessiond exited (${child.exitCode}):\n${log}`);
    if (existsSync(sock) && (await answers(sock))) return d;
    if (Date.now() > deadline) {
      await d.stop();
      throw new Error(`sessiond did not answer on ${sock} within 30 s:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

function answers(sock) {
  const c = new SessiondClient(`unix:${sock}`, credentials.createInsecure());
  return new Promise((res) => {
    c.status({}, new Metadata(), { deadline: Date.now() + 2000 }, (err) => {
      c.close();
      res(!err);
    });
  });
}

/** A raw client for checks that go around the adapter. */
export function rawClient(sock) {
  return new SessiondClient(`unix:${sock}`, credentials.createInsecure());
}

export function call(client, method, req) {
  return new Promise((res, rej) => client[method](req, (err, resp) => (err ? rej(err) : res(resp))));
}

/** stream calls a server-streaming method; it resolves with every message once the stream ends well. */
export function stream(client, method, req) {
  return new Promise((res, rej) => {
    const out = [];
    const s = client[method](req);
    s.on("data", (m) => out.push(m));
    s.on("error", rej);
    s.on("status", (st) => {
      if (st.code === 0) res(out);
    });
  });
}

export const uuid = () => randomUUID();

/** A user entry as the CLI writes it. */
export function userEntry(sessionId, text, extra = {}) {
  return {
    parentUuid: null,
    isSidechain: false,
    userType: "external",
    cwd: "/home/me/project",
    sessionId,
    version: "2.1.0",
    gitBranch: "main",
    type: "user",
    message: { role: "user", content: text },
    uuid: randomUUID(),
    timestamp: new Date().toISOString(),
    ...extra,
  };
}

export function assistantEntry(sessionId, parentUuid, text) {
  return {
    parentUuid,
    isSidechain: false,
    userType: "external",
    cwd: "/home/me/project",
    sessionId,
    version: "2.1.0",
    gitBranch: "main",
    type: "assistant",
    message: { role: "assistant", id: "msg_" + randomUUID(), content: [{ type: "text", text }] },
    requestId: "req_" + randomUUID(),
    uuid: randomUUID(),
    timestamp: new Date().toISOString(),
  };
}
