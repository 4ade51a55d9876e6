// Where sessiond listens, and whether that place can be trusted.
//
// defaultSocketPath follows internal/layout/defaults.go (DefaultSocket) step
// by step, so that this adapter, sessionctl and the daemon agree on the
// socket without configuration. checkSocketFolder is the trust check a Node
// client can make: Node has no API for the peer credentials of a Unix
// socket (SO_PEERCRED), so instead of asking the kernel who serves the
// socket we refuse any socket whose folder someone else could have made or
// could write into.

import { lstatSync, type Stats } from "node:fs";
import { userInfo } from "node:os";
import { dirname, isAbsolute, join, normalize, resolve } from "node:path";

const SOCKET_NAME = "sessiond.sock";

/** What defaultSocketPath reads besides the environment (tests replace it). */
export interface SocketPlatform {
  env: Record<string, string | undefined>;
  uid: number;
  platform: NodeJS.Platform;
  /** The home folder from the user database, used when HOME is unset. */
  home: () => string;
  /** Whether dir is a real folder owned by uid that nobody else may enter. */
  isPrivateFolder: (dir: string, uid: number) => boolean;
}

/**
 * The longest Unix socket path the kernel accepts: sun_path (108 bytes on
 * Linux, 104 on macOS and the BSDs) minus the terminating NUL, as the
 * daemon's MaxSocketPath.
 */
export function maxSocketPathBytes(platform: NodeJS.Platform = process.platform): number {
  return platform === "linux" ? 107 : 103;
}

/**
 * The default socket of sessiond, the first of:
 *
 *  1. $SESSIOND_SOCKET as given;
 *  2. $XDG_RUNTIME_DIR/sessiond/sessiond.sock when XDG_RUNTIME_DIR is absolute;
 *  3. on Linux, /run/user/<uid>/sessiond/sessiond.sock when /run/user/<uid>
 *     is a real folder of the user with no group or other permission;
 *  4. on macOS, $TMPDIR/sessiond/sessiond.sock when TMPDIR is absolute and
 *     the path fits a socket address;
 *  5. <state>/run/sessiond.sock when it fits, where state is
 *     $SESSIOND_STATE_DIR (must be absolute), else $XDG_STATE_HOME/sessiond
 *     (when absolute), else $HOME/.local/state/sessiond;
 *  6. /tmp/sessiond-<uid>/sessiond.sock.
 */
export function defaultSocketPath(p: Partial<SocketPlatform> = {}): string {
  const plat: SocketPlatform = {
    env: p.env ?? process.env,
    uid: p.uid ?? currentUid(),
    platform: p.platform ?? process.platform,
    home: p.home ?? (() => userInfo().homedir),
    isPrivateFolder: p.isPrivateFolder ?? isPrivateFolder,
  };
  const env = (name: string): string => plat.env[name] ?? "";
  const fits = (path: string): boolean => Buffer.byteLength(path, "utf8") <= maxSocketPathBytes(plat.platform);

  const explicit = env("SESSIOND_SOCKET");
  if (explicit !== "") return explicit;

  const runtime = env("XDG_RUNTIME_DIR");
  if (isAbsolute(runtime)) return join(runtime, "sessiond", SOCKET_NAME);

  if (plat.platform === "linux") {
    const dir = `/run/user/${plat.uid}`;
    if (plat.isPrivateFolder(dir, plat.uid)) return join(dir, "sessiond", SOCKET_NAME);
  } else if (plat.platform === "darwin") {
    const tmp = env("TMPDIR");
    if (isAbsolute(tmp) && fits(join(tmp, "sessiond", SOCKET_NAME))) return join(tmp, "sessiond", SOCKET_NAME);
  }

  const state = defaultStateDir(env, plat.home);
  if (state !== undefined && fits(join(state, "run", SOCKET_NAME))) return join(state, "run", SOCKET_NAME);

  return join("/tmp", `sessiond-${plat.uid}`, SOCKET_NAME);
}

// defaultStateDir is layout.defaultStateDir; undefined where the Go code
// returns an error (a relative SESSIOND_STATE_DIR or HOME, no home at all),
// which makes DefaultSocket fall through to /tmp.
function defaultStateDir(env: (name: string) => string, home: () => string): string | undefined {
  const state = env("SESSIOND_STATE_DIR");
  if (state !== "") return isAbsolute(state) ? clean(state) : undefined;
  const xdg = env("XDG_STATE_HOME");
  if (isAbsolute(xdg)) return join(xdg, "sessiond");
  let h = env("HOME");
  if (h !== "") {
    if (!isAbsolute(h)) return undefined;
  } else {
    try {
      h = home();
    } catch {
      return undefined;
    }
    if (!isAbsolute(h)) return undefined;
  }
  return join(clean(h), ".local", "state", "sessiond");
}

// clean is filepath.Clean for absolute paths: no trailing slash but the root.
function clean(path: string): string {
  const n = normalize(path);
  return n.length > 1 && n.endsWith("/") ? n.slice(0, -1) : n;
}

function currentUid(): number {
  return typeof process.getuid === "function" ? process.getuid() : -1;
}

function currentEuid(): number {
  return typeof process.geteuid === "function" ? process.geteuid() : currentUid();
}

/** layout.privateFolder: a real folder (not a symlink) owned by uid, mode & 077 == 0. */
export function isPrivateFolder(dir: string, uid: number): boolean {
  let st: Stats;
  try {
    st = lstatSync(dir);
  } catch {
    return false;
  }
  return st.isDirectory() && (st.mode & 0o077) === 0 && st.uid === uid;
}

/**
 * UntrustedSocketError: the socket's folder is not one that only you (or
 * root) control, so whoever serves the socket may be another user waiting
 * for your transcripts. Nothing was sent. Never worth retrying: the adapter
 * does not, and callers should not either.
 */
export class UntrustedSocketError extends Error {
  override readonly name = "UntrustedSocketError";
  /** Always false: a refused socket stays refused until someone fixes the folder. */
  readonly retryable = false;
  constructor(
    /** The socket that was refused. */
    readonly socketPath: string,
    /** Its folder, the thing that failed the check. */
    readonly folder: string,
    /** The uid owning the folder (or the symlink in its place). */
    readonly ownerUid: number,
    /** What is wrong with the folder, in words. */
    readonly problem: string,
  ) {
    const me = currentEuid();
    super(
      `refusing the socket ${socketPath}: its folder ${folder} ${problem}; ` +
        `it must be a real folder owned by you (uid ${me}) or root that no one else may write to. ` +
        `Nothing was sent to it. Another user may have created ${folder} (it belongs to uid ${ownerUid}) to receive your transcripts: ` +
        `remove ${folder} once you have checked who made it, or point SESSIOND_SOCKET (or XDG_RUNTIME_DIR) ` +
        `at a folder only you own, and start sessiond there`,
    );
  }
}

/**
 * SocketMissingError: there is no folder (hence no socket) where sessiond
 * should listen. The daemon is not running there; retrying is fine (it may
 * be starting).
 */
export class SocketMissingError extends Error {
  override readonly name = "SocketMissingError";
  readonly retryable = true;
  constructor(readonly socketPath: string, cause: unknown) {
    super(
      `no sessiond at ${socketPath}: its folder ${dirname(resolve(socketPath))} does not exist. ` +
        `Start sessiond (it makes the folder), or point SESSIOND_SOCKET at the socket it serves`,
      { cause },
    );
  }
}

/**
 * checkSocketFolder throws UntrustedSocketError unless the socket's folder
 * is a real folder (lstat: a symbolic link is refused, wherever it points)
 * owned by the effective uid or root, with no group or other write bit. It
 * throws SocketMissingError when the folder does not exist. It touches
 * nothing and connects to nothing.
 */
export function checkSocketFolder(socketPath: string): void {
  const folder = dirname(resolve(socketPath));
  let st: Stats;
  try {
    st = lstatSync(folder);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") throw new SocketMissingError(socketPath, err);
    throw new UntrustedSocketError(socketPath, folder, -1, `cannot be examined (${(err as Error).message})`);
  }
  const me = currentEuid();
  if (st.isSymbolicLink()) {
    throw new UntrustedSocketError(socketPath, folder, st.uid, `is a symbolic link, not a real folder`);
  }
  if (!st.isDirectory()) {
    throw new UntrustedSocketError(socketPath, folder, st.uid, `is not a folder`);
  }
  if (st.uid !== me && st.uid !== 0) {
    throw new UntrustedSocketError(socketPath, folder, st.uid, `belongs to uid ${st.uid}, not to you (uid ${me}) or root`);
  }
  if ((st.mode & 0o022) !== 0) {
    const mode = (st.mode & 0o7777).toString(8).padStart(4, "0");
    throw new UntrustedSocketError(socketPath, folder, st.uid, `can be written by its group or by others (mode ${mode})`);
  }
}
