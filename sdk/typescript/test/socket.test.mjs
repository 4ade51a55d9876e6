// defaultSocketPath picks the socket sessiond and sessionctl pick
// (internal/layout/defaults.go DefaultSocket).

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";

import { defaultSocketPath, maxSocketPathBytes } from "../dist/index.js";
import { isPrivateFolder } from "../dist/socket.js";
import { sessiondBin, tempDir } from "./helpers.mjs";

const long = "/" + "d".repeat(107); // no socket path fits under it
const privateRun = (dir, uid) => dir === "/run/user/1000" && uid === 1000;
const nonePrivate = () => false;
const noHome = () => {
  throw new Error("no user database entry");
};

describe("defaultSocketPath", () => {
  const cases = [
    ["SESSIOND_SOCKET wins", "linux", { SESSIOND_SOCKET: "/run/s.sock", XDG_RUNTIME_DIR: "/run/user/1000" }, noHome, privateRun, "/run/s.sock"],
    ["SESSIOND_SOCKET is taken as given", "linux", { SESSIOND_SOCKET: "rel/s.sock" }, noHome, privateRun, "rel/s.sock"],
    ["XDG_RUNTIME_DIR", "linux", { XDG_RUNTIME_DIR: "/run/user/1000", HOME: "/h" }, noHome, nonePrivate, "/run/user/1000/sessiond/sessiond.sock"],
    ["XDG_RUNTIME_DIR is cleaned", "linux", { XDG_RUNTIME_DIR: "/run//user/1000/", HOME: "/h" }, noHome, nonePrivate, "/run/user/1000/sessiond/sessiond.sock"],
    ["the private /run/user/<uid> without XDG_RUNTIME_DIR", "linux", { HOME: "/h" }, noHome, privateRun, "/run/user/1000/sessiond/sessiond.sock"],
    ["a relative XDG_RUNTIME_DIR is ignored", "linux", { XDG_RUNTIME_DIR: "run", HOME: "/h" }, noHome, nonePrivate, "/h/.local/state/sessiond/run/sessiond.sock"],
    ["state folder from HOME", "linux", { HOME: "/home/me" }, noHome, nonePrivate, "/home/me/.local/state/sessiond/run/sessiond.sock"],
    ["state folder from XDG_STATE_HOME", "linux", { XDG_STATE_HOME: "/s", HOME: "/h" }, noHome, nonePrivate, "/s/sessiond/run/sessiond.sock"],
    ["a relative XDG_STATE_HOME is ignored", "linux", { XDG_STATE_HOME: "s", HOME: "/h" }, noHome, nonePrivate, "/h/.local/state/sessiond/run/sessiond.sock"],
    ["state folder from SESSIOND_STATE_DIR", "linux", { SESSIOND_STATE_DIR: "/var/lib/sd/", HOME: "/h" }, noHome, nonePrivate, "/var/lib/sd/run/sessiond.sock"],
    ["a relative SESSIOND_STATE_DIR: /tmp", "linux", { SESSIOND_STATE_DIR: "sd", HOME: "/h" }, noHome, nonePrivate, "/tmp/sessiond-1000/sessiond.sock"],
    ["a relative HOME: /tmp", "linux", { HOME: "h" }, () => "/db", nonePrivate, "/tmp/sessiond-1000/sessiond.sock"],
    ["state folder from the user database", "linux", {}, () => "/var/lib/me", nonePrivate, "/var/lib/me/.local/state/sessiond/run/sessiond.sock"],
    ["state folder too deep for a socket: /tmp", "linux", { SESSIOND_STATE_DIR: long }, noHome, nonePrivate, "/tmp/sessiond-1000/sessiond.sock"],
    ["no home at all: /tmp", "linux", {}, noHome, nonePrivate, "/tmp/sessiond-1000/sessiond.sock"],
    ["macOS: the per-user TMPDIR", "darwin", { TMPDIR: "/var/folders/ab/cd/T/", HOME: "/Users/me" }, noHome, privateRun, "/var/folders/ab/cd/T/sessiond/sessiond.sock"],
    ["macOS without TMPDIR: the state folder", "darwin", { HOME: "/Users/me" }, noHome, privateRun, "/Users/me/.local/state/sessiond/run/sessiond.sock"],
    ["macOS TMPDIR too deep: the state folder", "darwin", { TMPDIR: long, HOME: "/Users/me" }, noHome, nonePrivate, "/Users/me/.local/state/sessiond/run/sessiond.sock"],
    ["Linux ignores TMPDIR", "linux", { TMPDIR: "/tmp", HOME: "/h" }, noHome, nonePrivate, "/h/.local/state/sessiond/run/sessiond.sock"],
  ];
  for (const [name, platform, env, home, isPrivate, want] of cases) {
    test(name, () => {
      assert.equal(defaultSocketPath({ env, uid: 1000, platform, home, isPrivateFolder: isPrivate }), want);
    });
  }

  test("the socket path limit is 107 bytes on Linux, 103 on macOS, counted in bytes", () => {
    assert.equal(maxSocketPathBytes("linux"), 107);
    assert.equal(maxSocketPathBytes("darwin"), 103);
    const fits = "/" + "a".repeat(107 - "/run/sessiond.sock".length - 1);
    const base = { uid: 1000, platform: "linux", home: noHome, isPrivateFolder: nonePrivate };
    assert.equal(defaultSocketPath({ ...base, env: { SESSIOND_STATE_DIR: fits } }), `${fits}/run/sessiond.sock`);
    assert.equal(defaultSocketPath({ ...base, env: { SESSIOND_STATE_DIR: fits + "a" } }), "/tmp/sessiond-1000/sessiond.sock");
    const multibyte = "/" + "é".repeat(50); // 100 bytes, 50 characters
    assert.equal(defaultSocketPath({ ...base, env: { SESSIOND_STATE_DIR: multibyte } }), "/tmp/sessiond-1000/sessiond.sock");
  });

  test("isPrivateFolder: a real folder of the uid that nobody else may enter", () => {
    const base = tempDir("priv-");
    const own = process.getuid();
    const priv = join(base, "priv");
    mkdirSync(priv, { mode: 0o700 });
    const open = join(base, "open");
    mkdirSync(open);
    chmodSync(open, 0o755);
    const link = join(base, "link");
    symlinkSync(priv, link);
    assert.equal(isPrivateFolder(priv, own), true);
    assert.equal(isPrivateFolder(open, own), false);
    assert.equal(isPrivateFolder(link, own), false);
    assert.equal(isPrivateFolder(priv, own + 1), false);
    assert.equal(isPrivateFolder(join(base, "missing"), own), false);
  });

  test("agrees with sessiond's own default (sessiond -h)", () => {
    const bin = sessiondBin();
    const base = tempDir("agree-");
    const envs = [
      { HOME: "/h" },
      { HOME: "/h", XDG_STATE_HOME: "/x/state" },
      { HOME: "/h", SESSIOND_STATE_DIR: join(base, "state") },
      { HOME: "/h", SESSIOND_STATE_DIR: long },
      { HOME: "/h", XDG_RUNTIME_DIR: "/run/user/4242" },
      { HOME: "/h", SESSIOND_SOCKET: "/some/where.sock" },
      { HOME: "relative" },
      { HOME: "/h", TMPDIR: "/tmp" },
    ];
    for (const env of envs) {
      const r = spawnSync(bin, ["-h"], { env, encoding: "utf8" });
      const out = r.stdout + r.stderr;
      const m = /-socket string\n.*\(default "([^"]*)"\)/.exec(out);
      assert.ok(m, `sessiond -h shows the default socket:\n${out}`);
      assert.equal(defaultSocketPath({ env }), m[1], `env ${JSON.stringify(env)}`);
    }
  });
});
