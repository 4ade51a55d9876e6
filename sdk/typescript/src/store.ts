// SessiondStore: the Claude Agent SDK's SessionStore over sessiond's gRPC API.

import { createHash, randomUUID } from "node:crypto";
import { homedir } from "node:os";
import { join, resolve } from "node:path";

import { Metadata, status as Status, type CallOptions, type ClientReadableStream } from "@grpc/grpc-js";
import {
  foldSessionSummary,
  type SessionKey,
  type SessionStore,
  type SessionStoreEntry,
  type SessionSummaryEntry,
} from "@anthropic-ai/claude-agent-sdk";

import { Connection } from "./channel.js";
import { isServiceError, REASON_SUMMARY_CONFLICT, SessiondError, toSessiondError } from "./errors.js";
import {
  EntryOutcome,
  type AppendRequest,
  type AppendResponse,
  type Entry,
  type ListSessionsResponse,
  type ListSubkeysResponse,
  type ListSummariesResponse,
  type ReadResponse,
  type SessiondClient,
  type SessionInfo,
  type SessionRef,
  type SessionSummary,
} from "./gen/sessiond/v1/sessiond.js";
import { defaultSocketPath, SocketMissingError, UntrustedSocketError } from "./socket.js";

/** Options of {@link SessiondStore}. */
export interface SessiondStoreOptions {
  /** The daemon's socket. Default: the same as sessionctl's ({@link defaultSocketPath}). */
  socketPath?: string;
  /**
   * The CLAUDE_CONFIG_DIR of the agent whose transcripts this store mirrors
   * (sent with every append: when it is sessiond's root, both on their
   * defaults, the CLI's own copy of each transcript is sessiond's file, and
   * sessiond answers the mirrored copies of the CLI's lines as duplicates).
   * Default, read at each append:
   * process.env.CLAUDE_CONFIG_DIR, else ~/.claude. Set it when you give the
   * agent its config dir through query()'s `env` option instead of
   * process.env.
   */
  agentConfigDir?: string;
  /** Deadline of one attempt of a call, in ms (default 15 000). */
  callTimeoutMs?: number;
  /** Deadline of one attempt of load(), which streams the whole transcript, in ms (default 120 000). */
  loadTimeoutMs?: number;
  /**
   * Pauses between attempts of a call that failed UNAVAILABLE or
   * DEADLINE_EXCEEDED, in ms; one more attempt than pauses. Default
   * [500, 2500, 7000]: four attempts over about 10 s, enough to ride out a
   * daemon restart. An append is retried with the same batch id, so the
   * daemon stores it once.
   */
  retryDelaysMs?: number[];
  /**
   * No retry starts once this many ms passed since the call began (default
   * 50 000, under the SDK's 60 s append timeout, after which the SDK stops
   * waiting and does not retry).
   */
  retryBudgetMs?: number;
  /**
   * Largest request sent in one Append, in bytes of entries (default 48 MiB,
   * under the daemon's 64 MiB --max-message-bytes). A bigger batch is sent
   * as several appends, each atomic, in order.
   */
  maxRequestBytes?: number;
}

/** Most bytes of a summary the daemon accepts (SummaryUpdate.data). */
const MAX_SUMMARY_BYTES = 32 * 1024;
/**
 * Names the TypeScript SDK's summary format to sessiond, which keeps one
 * summary per folder: a session the Python or Ruby adapter also writes
 * keeps each SDK's own, so neither refolds the other's.
 */
const SUMMARY_FOLDER = "claude-agent-sdk-typescript";
/** Summary conflicts in a row after which an append gives up. */
const MAX_SUMMARY_CONFLICTS = 20;

/**
 * A summary and the version it is stored under (0: the session has none
 * stored yet; data then is what to fold onto, possibly a fold of the
 * entries the session already holds).
 */
type Summary = {
  data: Record<string, unknown> | undefined;
  version: number;
  /** Lines of the transcript the summary covers, when known. */
  covered?: number;
  /** Lines were appended without a summary since: fold the whole transcript again. */
  rebuild?: boolean;
};

type BatchMemo = { id: string; digest: string };

type ReqOpts = { op: string; timeoutMs: number };

/**
 * SessiondStore is a SessionStore (the Claude Agent SDK's pluggable
 * transcript store) that keeps every transcript in sessiond: pass it as
 * query()'s `sessionStore` option.
 *
 * It connects lazily, on the first call, and only to a socket whose folder
 * is a real folder owned by you or root that no one else may write to
 * (else {@link UntrustedSocketError}, never retried).
 */
export class SessiondStore implements SessionStore {
  /** The socket this store talks to (absolute). */
  readonly socketPath: string;

  private readonly conn: Connection;
  private readonly opts: Required<Omit<SessiondStoreOptions, "socketPath" | "agentConfigDir">> & { agentConfigDir?: string };

  // The batch id of each entries array handed to append(). The SDK's
  // transcript mirror retries a failed append (3 attempts) by calling
  // append() again with the very same array object; reusing that array's
  // batch id makes the retry of a batch the daemon did store (the answer was
  // lost, or our own retries ran out while the daemon was restarting) an
  // acknowledged duplicate instead of a second copy of the entries that
  // carry no uuid. A WeakMap keeps no array alive. The id is reused only
  // when the array still serialises to the same bytes for the same key (a
  // caller recycling one array for new entries gets a new id), and it is
  // forgotten once the append succeeded (a deliberate second append of the
  // same array is a new batch).
  private readonly batchIds = new WeakMap<SessionStoreEntry[], BatchMemo>();

  // The summary this store last stored or saw per session, and its version
  // (the daemon's compare-and-swap token). No entry: unknown, ask the
  // daemon before folding.
  private readonly summaries = new Map<string, Summary>();

  // Appends to one transcript run one at a time, in call order, even when
  // the caller does not await each before the next.
  private readonly queues = new Map<string, Promise<unknown>>();

  // Set when the daemon predates ListSummaries (UNIMPLEMENTED): appends then
  // carry no summary and listSessionSummaries folds loaded transcripts.
  private summariesUnsupported = false;

  constructor(options: SessiondStoreOptions = {}) {
    this.conn = new Connection(options.socketPath ?? defaultSocketPath());
    this.socketPath = this.conn.socketPath;
    this.opts = {
      agentConfigDir: options.agentConfigDir,
      callTimeoutMs: options.callTimeoutMs ?? 15_000,
      loadTimeoutMs: options.loadTimeoutMs ?? 120_000,
      retryDelaysMs: options.retryDelaysMs ?? [500, 2500, 7000],
      retryBudgetMs: options.retryBudgetMs ?? 50_000,
      maxRequestBytes: options.maxRequestBytes ?? 48 * 1024 * 1024,
    };
  }

  /** Closes the connection (a later call opens a new one). */
  close(): void {
    this.conn.discard();
  }

  async append(key: SessionKey, entries: SessionStoreEntry[]): Promise<void> {
    checkKey(key);
    if (entries.length === 0) return;
    const payload = entries.map(serializeEntry);
    const batchId = this.batchIdFor(key, entries, payload);
    await this.serialised(transcriptId(key), async () => {
      const chunks = chunk(payload, this.opts.maxRequestBytes);
      let start = 0;
      for (const [i, bytes] of chunks.entries()) {
        const part = entries.slice(start, start + bytes.length);
        start += bytes.length;
        // A batch too big for one request goes as several, each with an id
        // derived from the batch's, so a retry of the whole is stored once.
        const id = chunks.length === 1 ? batchId : `${batchId}.${i}`;
        await this.appendBatch(key, part, bytes, id);
      }
    });
    this.batchIds.delete(entries);
  }

  /**
   * appendBatch sends one Append with batchId. For a main transcript it
   * folds the batch onto the session's summary with the SDK's
   * foldSessionSummary and sends the result along, as a compare-and-swap
   * on the version it was folded from; on a conflict it folds onto the
   * daemon's current summary and sends again, with the same batch id.
   */
  private async appendBatch(key: SessionKey, entries: SessionStoreEntry[], payload: Buffer[], batchId: string): Promise<AppendResponse> {
    const main = key.subpath === undefined;
    const sid = sessionId(key);
    for (let conflicts = 0; ; conflicts++) {
      const req: AppendRequest = {
        session: ref(key),
        entries: payload,
        batchId,
        summary: undefined,
        agentConfigDir: this.agentConfigDir(),
        entriesText: [],
      };
      const folded = main ? await this.fold(key, entries) : undefined;
      if (folded !== undefined) {
        // covers: the transcript's line count the fold started from; the
        // daemon refuses the summary (SUMMARY_CONFLICT) when lines were
        // added without one since, and the retry folds the whole transcript.
        req.summary = {
          data: encodeSummary(folded.data!),
          expectedVersion: folded.version,
          coversEntries: folded.covered ?? 0,
          checkCoverage: folded.covered !== undefined,
          folder: SUMMARY_FOLDER,
        };
      }
      let resp: AppendResponse;
      try {
        resp = await this.rpc({ op: "append", timeoutMs: this.opts.callTimeoutMs }, (c, o) =>
          unary<AppendResponse>((cb) => c.append(req, new Metadata(), o, cb)),
        );
      } catch (err) {
        if (main) this.summaries.delete(sid);
        if (
          folded !== undefined &&
          err instanceof SessiondError &&
          err.code === Status.ABORTED &&
          err.reason === REASON_SUMMARY_CONFLICT &&
          conflicts < MAX_SUMMARY_CONFLICTS
        ) {
          // Another writer (another process, or this one through another
          // store) stored a summary since the one we folded onto.
          continue;
        }
        throw err;
      }
      if (main && !this.summariesUnsupported) this.remember(sid, folded, resp);
      return resp;
    }
  }

  // fold folds entries onto what this store knows of the session's summary,
  // asking the daemon when it knows nothing. undefined: send no summary
  // (the daemon keeps none, or the base could not be had: the entries
  // matter more than the summary, which the next batch will rebuild).
  private async fold(key: SessionKey, entries: SessionStoreEntry[]): Promise<Summary | undefined> {
    if (this.summariesUnsupported) return undefined;
    let base: Summary | undefined = this.summaries.get(sessionId(key));
    try {
      if (base === undefined) base = await this.baseSummary(key);
      else if (base.rebuild) base = await this.foldTranscript(key, base.version);
    } catch (err) {
      if (err instanceof UntrustedSocketError) throw err;
      // Said, as the Python and Ruby adapters log it: otherwise nobody
      // could tell why the summary stays stale.
      process.emitWarning(
        `sessiond append to ${key.projectKey}/${key.sessionId}: cannot read the summary to fold onto (${err instanceof Error ? err.message : String(err)}); the entries are stored without updating the summary`,
        { code: "SESSIOND_SUMMARY" },
      );
      return undefined;
    }
    if (this.summariesUnsupported) return undefined;
    const prev = base.data === undefined ? undefined : { sessionId: key.sessionId, mtime: 0, data: base.data };
    const next = foldSessionSummary(prev, key, entries, { mtime: Date.now() });
    return { data: next.data, version: base.version, covered: base.covered };
  }

  // remember caches what the daemon now holds as the session's summary
  // after a successful append that carried `folded` (or no summary).
  private remember(sid: string, folded: Summary | undefined, resp: AppendResponse): void {
    if (resp.duplicateBatch || resp.summaryVersion === 0) {
      // Stored earlier, its summary with it (or a daemon that keeps none):
      // what the daemon holds is not known here.
      this.summaries.delete(sid);
      return;
    }
    // Lines another writer appended without a summary (sessionctl rename or
    // tag) since the summary we folded onto are not in the one just stored.
    // When the entry count shows some, or when this batch went without a
    // summary, the next batch folds the whole transcript again. The lines
    // the agent's CLI wrote into the transcript itself (its config dir is
    // sessiond's root) are counted apart (absorbedEntries): this batch
    // mirrors them, so the summary covers them.
    const stored = resp.results.filter((r) => r.outcome === EntryOutcome.ENTRY_OUTCOME_STORED).length;
    const complete =
      folded !== undefined && (folded.covered === undefined || resp.entries === folded.covered + stored + Number(resp.absorbedEntries ?? 0));
    this.summaries.set(
      sid,
      complete ? { data: folded.data, version: resp.summaryVersion, covered: resp.entries } : { data: undefined, version: resp.summaryVersion, rebuild: true },
    );
  }

  // baseSummary is what the next batch of a session folds onto when this
  // store does not know: the summary stored in the daemon; else, when the
  // session already holds entries (written before summaries existed, or by
  // sessionctl or the CLI itself, or stored by a batch whose answer was
  // lost), a fold of those entries, so that the first summary stored covers
  // the whole session and not only what this process appends.
  private async baseSummary(key: SessionKey): Promise<Summary> {
    let list: SessionSummary[];
    try {
      list = await this.listSummaries(key.projectKey, key.sessionId);
    } catch (err) {
      if (!isCode(err, Status.UNIMPLEMENTED)) throw err;
      this.summariesUnsupported = true;
      return { data: undefined, version: 0 };
    }
    // sessiond stores a session under its lower-case id (one UUID is one
    // session in any case), whatever case the key has.
    const stored = list.find((x) => x.sessionId.toLowerCase() === key.sessionId.toLowerCase());
    let data: Record<string, unknown> | undefined;
    if (stored !== undefined) {
      try {
        data = decodeSummary(stored.data);
      } catch {
        data = undefined;
      }
      // Another SDK's (the Python fold writes snake_case keys), not JSON,
      // or missing lines added without a summary: replace it with ours,
      // folded from the whole transcript.
      // Ours and covering every line: fold onto it.
      if (data !== undefined && !isForeignSummary(data) && stored.coversEntries === stored.entries) {
        return { data, version: stored.version, covered: stored.entries };
      }
    }
    return this.foldTranscript(key, stored?.version ?? 0);
  }

  // foldTranscript folds every entry the main transcript holds, to be
  // stored over the summary of the given version.
  private async foldTranscript(key: SessionKey, version: number): Promise<Summary> {
    const main = { projectKey: key.projectKey, sessionId: key.sessionId };
    const lines = await this.readLines(main);
    const entries = lines === null ? [] : entriesOf(lines);
    const data = entries.length === 0 ? undefined : foldSessionSummary(undefined, main, entries).data;
    return { data, version, covered: lines?.length ?? 0 };
  }

  async load(key: SessionKey): Promise<SessionStoreEntry[] | null> {
    checkKey(key);
    const lines = await this.readLines(key);
    // A transcript without a single line was never written through the
    // store (sessiond does not create empty transcripts): null, as for a key
    // never written. Lines that are not one JSON object (torn by a crash of
    // another writer, or foreign) are skipped, as the official readers skip
    // lines that fail to parse; a transcript holding only such lines loads
    // as [] (it exists, nothing in it is readable).
    if (lines === null || lines.length === 0) return null;
    return entriesOf(lines);
  }

  // readLines reads every line of a transcript; null when there is none.
  private async readLines(key: SessionKey): Promise<Entry[] | null> {
    try {
      return await this.rpc({ op: "load", timeoutMs: this.opts.loadTimeoutMs }, (c, o) =>
        collect(c.read({ session: ref(key), fromIndex: 0, tail: 0, text: false }, new Metadata(), o), (r: ReadResponse) => r.entries),
      );
    } catch (err) {
      if (isCode(err, Status.NOT_FOUND)) return null;
      throw err;
    }
  }

  async listSessions(projectKey: string): Promise<Array<{ sessionId: string; mtime: number }>> {
    let sessions: SessionInfo[];
    try {
      sessions = await this.rpc({ op: "listSessions", timeoutMs: this.opts.callTimeoutMs }, (c, o) =>
        collect(
          c.listSessions({ projectKey, limit: 0, offset: 0, continue: false, excludeArchived: false, fleet: false }, new Metadata(), o),
          (r: ListSessionsResponse) => r.sessions,
        ),
      );
    } catch (err) {
      if (isCode(err, Status.NOT_FOUND)) return [];
      throw err;
    }
    return sessions
      .filter((s) => s.session !== undefined && s.session.subpath === "")
      .map((s) => ({ sessionId: s.session!.sessionId, mtime: Math.floor(s.modifiedMs) }));
  }

  async listSessionSummaries(projectKey: string): Promise<SessionSummaryEntry[]> {
    let list: SessionSummary[];
    try {
      list = await this.listSummaries(projectKey, "");
    } catch (err) {
      if (!isCode(err, Status.UNIMPLEMENTED)) throw err;
      this.summariesUnsupported = true;
      return this.foldSummaries(projectKey);
    }
    const out: SessionSummaryEntry[] = [];
    for (const s of list) {
      let data: Record<string, unknown>;
      try {
        data = decodeSummary(s.data);
      } catch {
        continue; // Not ours to show; the SDK falls back to load() for it.
      }
      if (isForeignSummary(data)) continue; // Likewise.
      out.push({ sessionId: s.sessionId, mtime: Math.floor(s.mtimeMs), data });
    }
    return out;
  }

  // foldSummaries computes the summaries from the transcripts, for a
  // daemon that keeps none.
  private async foldSummaries(projectKey: string): Promise<SessionSummaryEntry[]> {
    const out: SessionSummaryEntry[] = [];
    for (const s of await this.listSessions(projectKey)) {
      const key = { projectKey, sessionId: s.sessionId };
      const entries = await this.load(key);
      if (entries === null) continue;
      out.push(foldSessionSummary(undefined, key, entries, { mtime: s.mtime }));
    }
    return out;
  }

  private async listSummaries(projectKey: string, sessionId: string): Promise<SessionSummary[]> {
    try {
      return await this.rpc({ op: "listSessionSummaries", timeoutMs: this.opts.callTimeoutMs }, (c, o) =>
        collect(c.listSummaries({ projectKey, sessionId, folder: SUMMARY_FOLDER }, new Metadata(), o), (r: ListSummariesResponse) => r.summaries),
      );
    } catch (err) {
      if (isCode(err, Status.NOT_FOUND)) return [];
      throw err;
    }
  }

  async delete(key: SessionKey): Promise<void> {
    checkKey(key);
    await this.serialised(transcriptId(key), async () => {
      try {
        await this.rpc({ op: "delete", timeoutMs: this.opts.callTimeoutMs }, (c, o) =>
          unary((cb) => c.delete({ session: ref(key), purge: false }, new Metadata(), o, cb)),
        );
      } catch (err) {
        if (!isCode(err, Status.NOT_FOUND)) throw err;
      }
    });
    if (key.subpath === undefined) this.summaries.delete(sessionId(key));
  }

  async listSubkeys(key: { projectKey: string; sessionId: string }): Promise<string[]> {
    try {
      const resp = await this.rpc({ op: "listSubkeys", timeoutMs: this.opts.callTimeoutMs }, (c, o) =>
        unary<ListSubkeysResponse>((cb) => c.listSubkeys({ session: ref({ projectKey: key.projectKey, sessionId: key.sessionId }) }, new Metadata(), o, cb)),
      );
      return resp.subkeys;
    } catch (err) {
      if (isCode(err, Status.NOT_FOUND)) return [];
      throw err;
    }
  }

  /**
   * appendWithBatchId sends entries as one batch named batchId, as append()
   * does internally (summary fold included), and returns the daemon's
   * answer. For tests and tools that need to replay a batch exactly; agents
   * use append().
   */
  async appendWithBatchId(key: SessionKey, entries: SessionStoreEntry[], batchId: string): Promise<AppendResponse> {
    checkKey(key);
    return this.serialised(transcriptId(key), () => this.appendBatch(key, entries, entries.map(serializeEntry), batchId));
  }

  private agentConfigDir(): string {
    const dir = this.opts.agentConfigDir ?? (process.env.CLAUDE_CONFIG_DIR || join(homedir(), ".claude"));
    // sessiond takes only an absolute path: a relative one is taken from
    // the working directory. The SDK normalises its config dir to NFC, and
    // so does sessiond its root.
    return resolve(dir).normalize("NFC");
  }

  private batchIdFor(key: SessionKey, entries: SessionStoreEntry[], payload: Buffer[]): string {
    const h = createHash("sha256");
    h.update(transcriptId(key));
    for (const p of payload) {
      h.update(String(p.length));
      h.update(":");
      h.update(p);
    }
    const digest = h.digest("hex");
    const memo = this.batchIds.get(entries);
    if (memo !== undefined && memo.digest === digest) return memo.id;
    const id = randomUUID();
    this.batchIds.set(entries, { id, digest });
    return id;
  }

  private serialised<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.queues.get(id) ?? Promise.resolve();
    const run = prev.then(fn, fn);
    const tail = run.catch(() => {});
    this.queues.set(id, tail);
    void tail.then(() => {
      if (this.queues.get(id) === tail) this.queues.delete(id);
    });
    return run;
  }

  /**
   * rpc runs one call with a deadline per attempt, retrying UNAVAILABLE and
   * DEADLINE_EXCEEDED (and a missing socket) on a fresh channel, whose
   * folder is checked again before it connects. An untrusted socket is
   * never retried. Other failures become SessiondError with the daemon's
   * message.
   */
  private async rpc<T>(r: ReqOpts, fn: (c: SessiondClient, o: Partial<CallOptions>) => Promise<T>): Promise<T> {
    const started = Date.now();
    const delays = this.opts.retryDelaysMs;
    for (let attempt = 0; ; attempt++) {
      let failure: unknown;
      try {
        const client = this.conn.client();
        return await fn(client, { deadline: Date.now() + r.timeoutMs });
      } catch (err) {
        const refused = this.conn.refused();
        if (refused !== undefined) {
          this.conn.discard();
          throw refused;
        }
        if (err instanceof UntrustedSocketError) throw err;
        failure = err;
      }
      const retryable =
        failure instanceof SocketMissingError ||
        (isServiceError(failure) && (failure.code === Status.UNAVAILABLE || failure.code === Status.DEADLINE_EXCEEDED));
      const delay = delays[attempt];
      if (!retryable || delay === undefined || Date.now() - started + delay > this.opts.retryBudgetMs) {
        throw this.describe(r.op, failure);
      }
      // A fresh channel for a lost connection (its folder is checked again
      // before it connects); a deadline leaves the channel to the calls
      // still running on it.
      if (!isServiceError(failure) || failure.code !== Status.DEADLINE_EXCEEDED) this.conn.discard();
      await sleep(delay);
    }
  }

  private describe(op: string, err: unknown): unknown {
    if (!isServiceError(err)) return err;
    const e = toSessiondError(op, err);
    if (e.reason === undefined && (TRANSPORT_CODES.has(err.code) || !err.details)) {
      // gRPC's own text ("Deadline exceeded after 15.001s,LB pick...",
      // "No connection established"), not sessiond's: say what happened
      // and what to do instead.
      const text = explain(err.code, err.details ?? "", this.socketPath);
      return new SessiondError(`sessiond ${op}: ${text} (${e.codeName})`, e.code, e.reason, e.details, { cause: err });
    }
    return e;
  }
}

// The codes gRPC itself answers with (the daemon's own answers carry a
// reason): their text is gRPC's, not sessiond's.
const TRANSPORT_CODES = new Set<Status>([
  Status.UNAVAILABLE,
  Status.DEADLINE_EXCEEDED,
  Status.CANCELLED,
  Status.UNIMPLEMENTED,
  Status.UNKNOWN,
  Status.UNAUTHENTICATED,
]);

/** What a person can act on, for a failure gRPC reported itself. */
function explain(code: Status, details: string, socketPath: string): string {
  if (details.includes("EACCES") || details.includes("ermission denied")) {
    return `permission denied on sessiond's socket ${socketPath}: it or its folder is not yours; run sessiond as you`;
  }
  switch (code) {
    case Status.UNAVAILABLE:
      return `no answer from sessiond at ${socketPath} (it stopped, is restarting, or was never started): start sessiond, or point SESSIOND_SOCKET at the socket it serves`;
    case Status.DEADLINE_EXCEEDED:
      return `sessiond at ${socketPath} did not answer in time (busy, or waiting on a slow disk): try again; \`sessionctl status\` shows what it is doing, and its log says why`;
    case Status.CANCELLED:
      return "the call was cancelled before sessiond answered";
    case Status.UNIMPLEMENTED:
      return `sessiond at ${socketPath} does not know this call: it is older than this adapter; upgrade sessiond`;
    case Status.UNAUTHENTICATED:
      return `sessiond at ${socketPath} refused the connection; check that it runs as you`;
    default:
      return `sessiond at ${socketPath} failed in a way it did not explain: its log says more`;
  }
}

function checkKey(key: { projectKey: string; sessionId: string; subpath?: string }): void {
  if (key.subpath === "") {
    // On the wire an empty subpath is the main transcript: refuse it here
    // rather than write a subagent's entries into the main transcript.
    throw new TypeError(
      `SessionKey.subpath is empty (session ${key.sessionId}); omit it for the main transcript, or name the subagent transcript such as "subagents/agent-abc"`,
    );
  }
}

function ref(key: { projectKey: string; sessionId: string; subpath?: string }): SessionRef {
  return { projectKey: key.projectKey, sessionId: key.sessionId, subpath: key.subpath ?? "" };
}

function sessionId(key: { projectKey: string; sessionId: string }): string {
  return JSON.stringify([key.projectKey, key.sessionId]);
}

function transcriptId(key: SessionKey): string {
  return JSON.stringify([key.projectKey, key.sessionId, key.subpath ?? null]);
}

/**
 * serializeEntry is JSON.stringify as UTF-8. A lone surrogate in a string
 * comes out as the escape \udXXX (ES2019 well-formed stringify), which is
 * valid JSON and valid UTF-8, so nothing is lost or replaced.
 */
function serializeEntry(entry: SessionStoreEntry, i: number): Buffer {
  const text: string | undefined = JSON.stringify(entry);
  if (text === undefined || entry === null || typeof entry !== "object" || Array.isArray(entry)) {
    throw new TypeError(`entry ${i} is not a JSON object (${entry === null ? "null" : Array.isArray(entry) ? "an array" : typeof entry})`);
  }
  return Buffer.from(text, "utf8");
}

// entriesOf parses the lines that are one JSON object each and skips the
// others: those the daemon marks malformed, and (should it not mark one)
// any that fails to parse or is not an object.
function entriesOf(lines: Entry[]): SessionStoreEntry[] {
  const out: SessionStoreEntry[] = [];
  for (const line of lines) {
    if (line.malformed) continue;
    const entry = parseEntry(line.data);
    if (entry !== undefined) out.push(entry);
  }
  return out;
}

function parseEntry(data: Buffer): SessionStoreEntry | undefined {
  let v: unknown;
  try {
    v = JSON.parse(data.toString("utf8"));
  } catch {
    return undefined;
  }
  if (v === null || typeof v !== "object" || Array.isArray(v)) return undefined;
  return v as SessionStoreEntry;
}

function encodeSummary(data: Record<string, unknown>): Buffer {
  let buf = Buffer.from(JSON.stringify(data), "utf8");
  if (buf.length <= MAX_SUMMARY_BYTES) return buf;
  // Too big for the daemon (a huge title or prompt): shorten the longest
  // strings, rather than lose the batch or leave a stale summary. The
  // listing shows at most a few hundred characters of any of them.
  const copy: Record<string, unknown> = { ...data };
  while (buf.length > MAX_SUMMARY_BYTES) {
    let longest: string | undefined;
    for (const [k, v] of Object.entries(copy)) {
      if (typeof v === "string" && (longest === undefined || v.length > (copy[longest] as string).length)) longest = k;
    }
    const s = longest === undefined ? "" : (copy[longest] as string);
    if (longest === undefined || s.length <= 64) break;
    copy[longest] = s.slice(0, Math.max(64, s.length >> 1));
    buf = Buffer.from(JSON.stringify(copy), "utf8");
  }
  return buf;
}

// The keys the Python SDK's fold_session_summary writes; the TypeScript
// fold writes the same fields in camelCase, and neither reads the other's.
const PYTHON_SUMMARY_KEYS = ["is_sidechain", "created_at", "first_prompt", "first_prompt_locked", "custom_title", "ai_title", "last_prompt", "summary_hint", "git_branch", "command_fallback"];

function isForeignSummary(data: Record<string, unknown>): boolean {
  return PYTHON_SUMMARY_KEYS.some((k) => k in data);
}

function decodeSummary(data: Buffer): Record<string, unknown> {
  const v: unknown = JSON.parse(data.toString("utf8"));
  if (v === null || typeof v !== "object" || Array.isArray(v)) throw new TypeError("summary is not a JSON object");
  return v as Record<string, unknown>;
}

function chunk(payload: Buffer[], max: number): Buffer[][] {
  const out: Buffer[][] = [];
  let cur: Buffer[] = [];
  let size = 0;
  for (const p of payload) {
    if (cur.length > 0 && size + p.length > max) {
      out.push(cur);
      cur = [];
      size = 0;
    }
    cur.push(p);
    size += p.length;
  }
  if (cur.length > 0) out.push(cur);
  return out;
}

function isCode(err: unknown, code: Status): boolean {
  return err instanceof SessiondError && err.code === code;
}

function unary<T>(start: (cb: (err: import("@grpc/grpc-js").ServiceError | null, resp: T) => void) => unknown): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    start((err, resp) => (err ? reject(err) : resolve(resp)));
  });
}

// collect gathers the items of every message of a server stream: a
// transcript's entries, or a listing's pages.
function collect<R, T>(stream: ClientReadableStream<R>, items: (r: R) => T[]): Promise<T[]> {
  return new Promise<T[]>((resolve, reject) => {
    const out: T[] = [];
    stream.on("data", (r: R) => {
      for (const e of items(r)) out.push(e);
    });
    // grpc-js ends the stream (push(null)) before it emits a failed status
    // as 'error': only an OK status means the answer came whole.
    stream.on("error", reject);
    stream.on("status", (st: { code: Status }) => {
      if (st.code === Status.OK) resolve(out);
    });
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
