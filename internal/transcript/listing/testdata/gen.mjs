#!/usr/bin/env node
// gen.mjs regenerates the goldens of fork/golden_test.go, listing/summary_test.go
// and listing/meta_golden_test.go by asking the official TypeScript SDK
// (@anthropic-ai/claude-agent-sdk, the version e2e/sdk pins) what it does:
//
//   go test ./internal/transcript/listing -run 'Golden' -update
//
// runs it (node must be on PATH). By hand:
//
//   node internal/transcript/listing/testdata/gen.mjs [fixtures dir]
//
// Inputs: the real transcripts in the shared fixtures folder (default
// ../../../../../shared/fixtures from here) and small synthetic transcripts
// this script writes to fork/testdata/synthetic/ and listing/testdata/synthetic/ (committed,
// so the Go tests read the very bytes the SDK read). Outputs:
//
//   fork/testdata/goldens.json.gz
//                          forkSession's output for each input and case,
//                          one record per line: sha256 of the line with the
//                          fork's new uuids renamed <new-N> in order of first
//                          appearance, its keys, and the fields a fork edits
//                          (kept small: the outputs themselves are megabytes)
//   fork/testdata/random.json.gz
//                          forkSession and getSessionInfo on small random
//                          transcripts (inputs included)
//   listing/testdata/goldens.json
//                          getSessionInfo / listSessions for each input, as
//                          is and with renameSession / tagSession lines
//                          appended (their bytes are recorded), plus the
//                          lines renameSession and tagSession append for a
//                          list of titles and tags, or the error they throw
//
// The SDK module is $SESSIOND_SDK_MJS, else e2e/sdk's node_modules copy,
// else /tmp/sdk's. Every SDK call runs against a throw-away
// CLAUDE_CONFIG_DIR; `new Date()` is frozen to FIXED_TIME so that the
// timestamps a fork writes are known.

import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import zlib from 'node:zlib';

const FIXED_TIME = Date.UTC(2030, 0, 2, 3, 4, 5, 678); // 2030-01-02T03:04:05.678Z
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...a) {
    if (a.length === 0) super(FIXED_TIME);
    else super(...a);
  }
};

const here = path.dirname(fileURLToPath(import.meta.url));
const forkDir = path.join(here, '..', '..', 'fork', 'testdata');
const fixtures = path.resolve(process.argv[2] ?? path.join(here, '../../../../../shared/fixtures'));
const sdkCandidates = [
  process.env.SESSIOND_SDK_MJS,
  path.join(here, '../../../../e2e/sdk/node_modules/@anthropic-ai/claude-agent-sdk/sdk.mjs'),
  '/tmp/sdk/node_modules/@anthropic-ai/claude-agent-sdk/sdk.mjs',
].filter(Boolean);
const sdkPath = sdkCandidates.find((p) => fs.existsSync(p));
if (!sdkPath) {
  console.error(`gen.mjs: the SDK is not installed (looked for ${sdkCandidates.join(', ')}); run npm ci --prefix e2e/sdk`);
  process.exit(1);
}
const sdk = await import(pathToFileURL(sdkPath).href);
const sdkVersion = JSON.parse(fs.readFileSync(path.join(path.dirname(sdkPath), 'package.json'), 'utf8')).version;

const UUID_RE = /[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}/g;
const sha256 = (s) => createHash('sha256').update(s).digest('hex');

// A session id for an input: the first "sessionId":"<uuid>" in it, else one
// made from its name.
function sessionIdOf(name, buf) {
  const m = /"sessionId":"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"/.exec(buf.toString('latin1'));
  if (m) return m[1];
  const h = sha256(name);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-8${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

// withSession lays out a throw-away config dir holding one session file and
// calls fn(dir, file) with CLAUDE_CONFIG_DIR pointing at it.
async function withSession(sid, buf, fn) {
  const cfg = fs.mkdtempSync(path.join(os.tmpdir(), 'sessiond-gen-cfg-'));
  const proj = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sessiond-gen-proj-')));
  const key = proj.replace(/[^A-Za-z0-9]/g, '-');
  const pdir = path.join(cfg, 'projects', key);
  fs.mkdirSync(pdir, { recursive: true });
  const file = path.join(pdir, `${sid}.jsonl`);
  fs.writeFileSync(file, buf);
  process.env.CLAUDE_CONFIG_DIR = cfg;
  try {
    return await fn(proj, file, pdir);
  } finally {
    delete process.env.CLAUDE_CONFIG_DIR;
    fs.rmSync(cfg, { recursive: true, force: true });
    fs.rmSync(proj, { recursive: true, force: true });
  }
}

const FIELDS = ['type', 'subtype', 'uuid', 'parentUuid', 'logicalParentUuid', 'sessionId', 'timestamp', 'isSidechain',
  'requestSessionId', 'forkedFrom', 'customTitle'];

// normalizeNew renames the uuids of out that src does not have (the ones
// the fork made) <new-N>, in order of first appearance.
function normalizeNew(out, src) {
  const known = new Set(src.toString('utf8').match(UUID_RE) ?? []);
  const names = new Map();
  return out.replace(UUID_RE, (u) => {
    if (known.has(u)) return u;
    if (!names.has(u)) names.set(u, `<new-${names.size + 1}>`);
    return names.get(u);
  });
}

// forkRecords describes a fork's output line by line.
function forkRecords(out, src) {
  const lines = normalizeNew(out, src).split('\n');
  if (lines.at(-1) !== '') throw new Error('fork output does not end with a newline');
  return lines.slice(0, -1).map((l) => {
    const o = JSON.parse(l);
    const f = {};
    for (const k of FIELDS) if (k in o) f[k] = o[k];
    return { h: sha256(l), n: Buffer.byteLength(l), k: Object.keys(o).join(','), f };
  });
}

// Conversation entries a fork could stop at.
function messageUuids(buf) {
  const ids = [];
  for (const l of buf.toString('utf8').split('\n')) {
    try {
      const o = JSON.parse(l);
      if ((o.type === 'user' || o.type === 'assistant') && !o.isSidechain && typeof o.uuid === 'string') ids.push(o.uuid);
    } catch {}
  }
  return ids;
}

async function forkCase(input, buf, sid, name, opts) {
  const rec = { input, sessionId: sid, name, opts };
  await withSession(sid, buf, async (dir, file, pdir) => {
    try {
      const r = await sdk.forkSession(sid, { dir, ...opts });
      rec.lines = forkRecords(fs.readFileSync(path.join(pdir, `${r.sessionId}.jsonl`), 'utf8'), buf);
    } catch (e) {
      rec.error = e.message;
    }
  });
  return rec;
}

function readInputs(synthDir, synth) {
  const inputs = [];
  for (const f of fs.readdirSync(fixtures).filter((f) => f.endsWith('.jsonl')).sort()) {
    inputs.push({ input: `fixture:${f}`, buf: fs.readFileSync(path.join(fixtures, f)) });
  }
  fs.rmSync(synthDir, { recursive: true, force: true });
  fs.mkdirSync(synthDir, { recursive: true });
  for (const [name, buf] of Object.entries(synth)) {
    fs.writeFileSync(path.join(synthDir, `${name}.jsonl`), buf);
    inputs.push({ input: `synthetic:${name}.jsonl`, buf });
  }
  return inputs;
}

// ---- synthetic transcripts ----

const SID = '0f0f0f0f-1111-4222-8333-444444444444';
const OTHER = '9e9e9e9e-5555-4666-8777-888888888888';
const u = (n) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
const base = (n, parent, extra) => ({
  parentUuid: parent,
  isSidechain: false,
  userType: 'external',
  cwd: '/work/demo',
  sessionId: SID,
  version: '2.1.40',
  gitBranch: 'main',
  ...extra,
  uuid: u(n),
  timestamp: `2026-03-01T10:00:${String(n % 60).padStart(2, '0')}.000Z`,
});
const userMsg = (n, parent, content, extra = {}) => base(n, parent, { type: 'user', message: { role: 'user', content }, ...extra });
const asstMsg = (n, parent, text, extra = {}) =>
  base(n, parent, { type: 'assistant', message: { id: `msg_${n}`, role: 'assistant', content: [{ type: 'text', text }] }, requestId: `req_${n}`, ...extra });
const progress = (n, parent) => base(n, parent, { type: 'progress', data: { type: 'hook_progress' } });
const jsonl = (...objs) => Buffer.from(objs.map((o) => (typeof o === 'string' ? o : JSON.stringify(o)) + '\n').join(''));
const pad = (n, parent, size) => asstMsg(n, parent, 'x'.repeat(size));

function forkSynthetic() {
  const features = Buffer.concat([
    jsonl(
      { type: 'history-suppression', sessionId: SID, cause: 'user', ts: '2026-03-01T09:00:00.000Z' },
      { type: 'hybrid-organization', sessionId: SID, organizationUuid: 'ABCDEF01-2345-4678-9ABC-DEF012345678' },
      { type: 'hybrid-organization', sessionId: OTHER, organizationUuid: 'abcdef01-2345-4678-9abc-def012345678' },
      { type: 'file-history-snapshot', messageId: u(2), snapshot: { messageId: u(2), trackedFileBackups: {}, timestamp: '2026-03-01T10:00:00.000Z' }, isSnapshotUpdate: false },
      progress(1, null),
      userMsg(2, u(1), 'First prompt of the features session', { teamName: 't', agentName: 'a', slug: 'some-slug', sessionKind: 'interactive' }),
      asstMsg(3, u(2), 'reply', { requestSessionId: OTHER }),
      asstMsg(4, u(3), 'forked before', { forkedFrom: { sessionId: OTHER, messageUuid: u(99) } }),
      base(5, u(4), { type: 'user', message: { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'ok' }] }, sourceToolAssistantUUID: u(4), toolUseResult: 'ok' }),
      progress(6, u(5)),
      progress(7, u(6)),
      base(8, u(7), { type: 'system', subtype: 'model_refusal_fallback', content: 'fallback', level: 'info' }),
      base(9, u(8), { type: 'attachment', attachment: { type: 'deferred_tools_record', nameOnlyAnnouncements: [u(2), 'SomeTool', u(6), u(404), 7] } }),
      base(10, u(9), { type: 'attachment', attachment: { type: 'queued_command', prompt: 'queued', source_uuid: u(2), delivery_id: 'd1' } }),
      base(11, u(10), { type: 'system', subtype: 'voice_call_talk', content: 'talk', fold: { command: { type: 'queued_command', source_uuid: u(3) }, other: 1 } }),
      base(30, u(11), { type: 'attachment', attachment: { type: 'queued_command', prompt: 'queued from elsewhere', source_uuid: u(77) } }),
      { ...userMsg(12, u(500), 'sidechain prompt'), isSidechain: true },
      userMsg(13, u(12), 'child of a sidechain entry'),
      asstMsg(14, u(13), 'logical', { logicalParentUuid: u(6) }),
      asstMsg(15, u(14), 'logical missing', { logicalParentUuid: u(404) }),
      asstMsg(16, u(15), 'logical null', { logicalParentUuid: null }),
      { type: 'custom-title', customTitle: 'Features title', sessionId: SID },
      { type: 'ai-title', aiTitle: 'AI features title', sessionId: SID },
      { type: 'tag', tag: 'keep', sessionId: SID },
      { type: 'last-prompt', lastPrompt: 'last', sessionId: SID },
      { type: 'queue-operation', operation: 'enqueue', timestamp: '2026-03-01T10:01:00.000Z', sessionId: SID },
      { type: 'content-replacement', sessionId: SID, replacements: [{ kind: 'tool-result', toolUseId: 'toolu_1', replacement: 'r1' }, 'not an object', [1]] },
      { type: 'content-replacement', sessionId: OTHER, replacements: [{ kind: 'other session' }] },
      { type: 'content-replacement', sessionId: SID, replacements: [{ kind: 'tool-result', toolUseId: 'toolu_2', replacement: 'r2' }] },
      { type: 'relocated', sessionId: SID, relocatedCwd: '/work/moved' },
      { type: 'relocated', sessionId: OTHER, relocatedCwd: '/work/other' },
      { type: 'atis-latch', sessionId: SID, atis: 'abc"\\XYZ' },
      { type: 'atis-latch', sessionId: SID, atis: 'has space' },
      { type: 'tools-used', sessionId: SID, tools: ['Bash', '', 3, 'Read\u00e9'] },
    ),
    Buffer.from('{"parentUuid":"' + u(16) + '","type":"user","uuid":"' + u(17) + '","message":{"role":"user","content":"dup \\u00e9 \\/ escapes"},"type":"user","sessionId":"' + SID + '","isSidechain":false}\n'),
    Buffer.from('  \t{ "parentUuid" : "' + u(17) + '" ,\r "type":"assistant", "uuid":"' + u(18) + '", "message": {"id":"msg_18","role":"assistant","content":[ {"type":"text","text":"spaced"} ]}, "num": 1.50, "sessionId":"' + SID + '"}\n'),
    Buffer.concat([Buffer.from('{"parentUuid":"' + u(18) + '","type":"user","uuid":"' + u(19) + '","message":{"role":"user","content":"bad '), Buffer.from([0xff, 0xe2, 0x82]), Buffer.from(' utf8"},"sessionId":"' + SID + '"}\n')]),
    jsonl(
      base(20, u(19), { type: 'user', message: { role: 'user', content: 'no timestamp last' } }),
    ),
  ]);
  // The last entry must have no timestamp: drop it.
  const featuresText = features.toString('latin1').replace(/,"timestamp":"2026-03-01T10:00:20\.000Z"/, '');

  const compaction = jsonl(
    userMsg(1, null, 'compaction session prompt'),
    asstMsg(2, u(1), 'before 1'),
    userMsg(3, u(2), 'second prompt'),
    asstMsg(4, u(3), 'before 2'),
    base(5, null, {
      type: 'system', subtype: 'compact_boundary', content: 'Conversation compacted', logicalParentUuid: u(4),
      compactMetadata: {
        trigger: 'auto', preTokens: 1000, postTokens: 10, runningTurnSends: [u(3)],
        preservedSegment: { headUuid: u(3), anchorUuid: u(6), tailUuid: u(4) },
      },
    }),
    userMsg(6, u(5), 'This session is being continued from a previous conversation.', { isCompactSummary: true }),
    asstMsg(7, u(6), 'after'),
    base(8, u(7), { type: 'system', subtype: 'compact_boundary', content: 'Compacted again', logicalParentUuid: u(7), compactMetadata: { trigger: 'manual', preTokens: 5, preservedMessages: { anchorUuid: u(7), uuids: [u(6), u(7)], allUuids: [u(6), u(7), u(404)] } } }),
    progress(9, u(8)),
  );

  const plugin = jsonl(
    userMsg(1, null, 'The demo plugin sent a message:\nPlease review the diff' +
      '\n\nThis is how Claude Code surfaces a prompt a plugin submits between turns \u2014 it starts this turn in the user\'s place. Address the message above.',
    { pluginPrompt: { text: 'Please review the diff' } }),
    asstMsg(2, u(1), 'sure'),
  );
  return {
    features: Buffer.from(featuresText, 'latin1'),
    compaction,
    'plugin-prompt': plugin,
    'sidechain-only': jsonl({ ...userMsg(1, null, 'side'), isSidechain: true }),
    'no-messages': jsonl({ type: 'summary', summary: 'only a summary', leafUuid: u(1) }),
  };
}

function summarySynthetic() {
  const long = '  ' + 'a'.repeat(198) + '\u{1F600}' + 'tail text that is cut off\nwith a newline  ';
  const out = {
    'long-prompt': jsonl(userMsg(1, null, long), asstMsg(2, u(1), 'ok')),
    'command-fallback': jsonl(
      userMsg(1, null, '<command-name>/clear</command-name>\n<command-message>clear</command-message>\n<command-args></command-args>'),
      userMsg(2, u(1), '<command-name>/second</command-name>'),
      asstMsg(3, u(2), 'ok'),
    ),
    'bash-input': jsonl(userMsg(1, null, '<bash-input>  ls -la  </bash-input>')),
    pasted: jsonl(userMsg(1, null, 'Look at this:\n\n<pasted_content id="a1b2">\nline one\nline two\n</pasted_content id="a1b2">\n\nthanks')),
    skips: jsonl(
      userMsg(1, null, 'meta', { isMeta: true }),
      base(2, u(1), { type: 'user', message: { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: 'x' }] } }),
      userMsg(3, u(2), 'summary of before', { isCompactSummary: true }),
      userMsg(4, u(3), '<system-reminder>remember</system-reminder>'),
      userMsg(5, u(4), '[Request interrupted by user for tool use]'),
      userMsg(6, u(5), [{ type: 'image', source: {} }, { type: 'text', text: '   ' }, { type: 'text', text: 'Real prompt in blocks' }]),
    ),
    'image-only': jsonl(userMsg(1, null, [{ type: 'image', source: { type: 'base64', data: 'AAAA' } }]), asstMsg(2, u(1), 'an image')),
    titles: jsonl(
      { type: 'summary', summary: 'Old summary line', leafUuid: u(2) },
      userMsg(1, null, 'prompt'),
      asstMsg(2, u(1), 'reply', { gitBranch: 'feature/x' }),
      { type: 'ai-title', aiTitle: 'AI title', sessionId: SID },
      '{"type": "custom-title", "customTitle": "Spaced custom title", "sessionId": "' + SID + '"}',
      { type: 'last-prompt', lastPrompt: 'the last prompt', sessionId: SID },
      { type: 'tag', tag: 'first-tag', sessionId: SID },
      { type: 'relocated', sessionId: OTHER, relocatedCwd: '/moved/here' },
    ),
    'ai-only': jsonl(userMsg(1, null, 'prompt'), { type: 'ai-title', aiTitle: 'Only AI', sessionId: SID }, { type: 'tag', tag: 'x', sessionId: SID }, { type: 'tag', tag: '', sessionId: SID }),
    'summary-hint': jsonl(asstMsg(1, null, 'no user prompt'), { type: 'summary', summary: 'A summary hint', leafUuid: u(1) }),
    'torn-splice': Buffer.from(
      JSON.stringify(userMsg(1, null, 'spliced prompt')) + '\n' +
      JSON.stringify(asstMsg(2, u(1), 'torn')).slice(0, 80) + JSON.stringify({ type: 'custom-title', customTitle: 'Spliced title', sessionId: SID }) + '\n' +
      JSON.stringify(asstMsg(3, u(1), 'torn again')).slice(0, 60) + JSON.stringify({ type: 'tag', tag: 'spliced-tag', sessionId: SID }) + '\n' +
      '{"type":"custom-title","customTitle":"unterminated'),
    'timestamps': jsonl({ type: 'queue-operation', operation: 'enqueue', timestamp: '2026-02-10T21:11:56.906+01:00', sessionId: SID }, userMsg(1, null, 'p')),
    'sidechain-first': jsonl({ ...userMsg(1, null, 'side'), isSidechain: true }, userMsg(2, u(1), 'main')),
    'nothing': jsonl(asstMsg(1, null, 'only an assistant')),
    'sdk-entrypoint': jsonl({ type: 'queue-operation', operation: 'enqueue', sessionId: SID }, userMsg(1, null, 'from the SDK', { entrypoint: 'sdk-ts' })),
    'cli-then-sdk': jsonl(userMsg(1, null, 'cli first', { entrypoint: 'cli' }), asstMsg(2, u(1), 'ok', { entrypoint: 'sdk-py' })),
    'late-sdk': jsonl(userMsg(1, null, 'no entrypoint in the head'), asstMsg(2, u(1), 'ok', { entrypoint: 'sdk-cli' })),
    'daemon': jsonl({ type: 'queue-operation', operation: 'enqueue', sessionId: SID, sessionKind: 'interactive' }, userMsg(1, null, 'daemon work', { sessionKind: 'daemon-worker' })),
    'kind-no-parent': jsonl({ type: 'queue-operation', operation: 'enqueue', sessionId: SID, sessionKind: 'daemon' }, { type: 'last-prompt', lastPrompt: 'lp', sessionId: SID }),
  };
  // Big files: the head and tail windows are 64 KiB.
  const head = [userMsg(1, null, 'big session prompt'), { type: 'custom-title', customTitle: 'Head title', sessionId: SID }, { type: 'ai-title', aiTitle: 'Head AI', sessionId: SID }];
  const middle = [];
  for (let i = 0; i < 24; i++) middle.push(pad(10 + i, u(9 + i), 3000));
  // Past the head window, and more than 64 KiB before the end.
  middle.splice(21, 0, { type: 'custom-title', customTitle: 'Middle title, lost', sessionId: SID }, { type: 'last-prompt', lastPrompt: 'middle last prompt', sessionId: SID });
  const tail = [];
  for (let i = 0; i < 21; i++) tail.push(pad(100 + i, u(99 + i), 3000));
  out['big-middle-title'] = jsonl(...head, ...middle, ...tail);
  out['big-tail-title'] = jsonl(...head, ...middle, ...tail, { type: 'custom-title', customTitle: 'Tail title', sessionId: SID }, { type: 'tag', tag: 'tail-tag', sessionId: SID });
  // A line crossing the end of the head window, with a gitBranch value
  // cut by it, and a custom-title spliced on a line crossing the start of
  // the tail window.
  const cross = [userMsg(1, null, 'crossing prompt', { gitBranch: 'x'.repeat(10) })];
  cross.push(pad(2, u(1), 65536 - 900));
  const crossText = jsonl(...cross).toString();
  const before = 65536 - Buffer.byteLength(crossText) - 40;
  out['window-edges'] = Buffer.concat([
    Buffer.from(crossText),
    Buffer.from(JSON.stringify(asstMsg(3, u(2), 'y'.repeat(Math.max(0, before)), { gitBranch: 'crossing-branch-name' })) + '\n'),
    jsonl(pad(4, u(3), 60000)),
    Buffer.from(JSON.stringify(asstMsg(5, u(4), 'torn')).slice(0, 100) + JSON.stringify({ type: 'custom-title', customTitle: 'Tail edge title', sessionId: SID }) + '\n'),
    jsonl(pad(6, u(5), 65536 - 1400)),
  ]);
  return out;
}

// ---- random transcripts ----
//
// Small transcripts made at random (a fixed seed, so the file is
// reproducible) with what makes forks and listings hard: branches,
// duplicate uuids, progress chains and loops, sidechain entries, compact
// boundaries with preserved segments, queued commands, split assistant
// messages and their tool results, torn lines. For each, the SDK's fork
// (with a cut in most) and getSessionInfo.

function randomTranscripts(count, seed) {
  const rnd = () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const pick = (a) => a[Math.floor(rnd() * a.length)];
  const out = [];
  for (let k = 0; k < count; k++) {
    const n = 1 + Math.floor(rnd() * 25);
    const lines = [];
    const ids = [];
    const anyId = (d) => (ids.length ? pick(ids) : d);
    for (let i = 1; i <= n; i++) {
      const id = ids.length && rnd() < 0.04 ? pick(ids) : u(i);
      const parent = rnd() < 0.15 ? null : rnd() < 0.1 ? u(900 + i) : anyId(null);
      const t = pick(['user', 'user', 'assistant', 'assistant', 'progress', 'progress', 'system', 'system', 'attachment',
        'file-history-snapshot', 'custom-title', 'ai-title', 'tag', 'summary', 'last-prompt', 'relocated', 'queue-operation']);
      const common = () => {
        const c = { parentUuid: parent };
        if (rnd() < 0.9) c.isSidechain = rnd() < 0.12;
        c.sessionId = rnd() < 0.9 ? SID : OTHER;
        c.cwd = '/w';
        c.gitBranch = pick(['main', 'dev', 'x"y']);
        return c;
      };
      let o;
      switch (t) {
        case 'user':
          o = { ...common(), type: 'user', message: { role: 'user', content: pick(['hello ' + i, [{ type: 'text', text: 'blocks ' + i }],
            [{ type: 'tool_result', tool_use_id: 'tu' + Math.floor(rnd() * 4), content: 'r' }],
            [{ type: 'tool_result', tool_use_id: 'tu' + Math.floor(rnd() * 4), content: 'r' }, { type: 'tool_result', tool_use_id: 'tu' + Math.floor(rnd() * 4), content: 'r' }],
            '<command-name>/c' + i + '</command-name>', 'x'.repeat(250)]) } };
          if (rnd() < 0.2) o.isMeta = true;
          if (rnd() < 0.1) o.isCompactSummary = true;
          if (rnd() < 0.3) o.sourceToolAssistantUUID = anyId(u(1));
          if (rnd() < 0.1) o.agentId = pick(['a1', 'a2']);
          break;
        case 'assistant':
          o = { ...common(), type: 'assistant', message: { id: 'm' + Math.floor(rnd() * 6), content: rnd() < 0.5 ? [{ type: 'text', text: 'answer ' + i }] : [{ type: 'tool_use', id: 'tu' + Math.floor(rnd() * 4), name: 'Bash', input: {} }] } };
          if (rnd() < 0.3) o.requestSessionId = pick([SID, 'other']);
          if (rnd() < 0.2) o.forkedFrom = { sessionId: 'ff', messageUuid: u(1) };
          if (rnd() < 0.1) o.agentId = pick(['a1', 'a2']);
          if (rnd() < 0.05) o.teamName = 'team';
          break;
        case 'progress':
          o = { ...common(), type: 'progress', data: {} };
          break;
        case 'system':
          o = { ...common(), type: 'system', subtype: pick(['compact_boundary', 'compact_boundary', 'local_command', 'model_refusal_fallback', 'voice_call_talk']) };
          if (o.subtype === 'compact_boundary') {
            if (rnd() < 0.7) o.parentUuid = null;
            o.logicalParentUuid = anyId(null);
            const cm = { trigger: 'auto' };
            if (rnd() < 0.5) cm.preservedSegment = { headUuid: anyId(u(1)), anchorUuid: rnd() < 0.3 ? id : anyId(u(2)), tailUuid: anyId(u(3)) };
            if (rnd() < 0.3) cm.preservedMessages = { anchorUuid: rnd() < 0.3 ? id : anyId(u(2)), uuids: ids.slice(-2), allUuids: ids.slice(-3) };
            if (rnd() < 0.3) cm.durationMs = 0;
            if (rnd() < 0.3) cm.runningTurnSends = [anyId(u(1))];
            if (rnd() < 0.3) cm.postTokens = 5;
            o.compactMetadata = cm;
          }
          if (o.subtype === 'voice_call_talk') o.fold = { command: { type: 'queued_command', source_uuid: anyId(u(77)) } };
          break;
        case 'attachment':
          o = { ...common(), type: 'attachment', attachment: rnd() < 0.1 ? { type: 'fork_briefing' } : rnd() < 0.5
            ? { type: 'queued_command', prompt: 'q', source_uuid: rnd() < 0.5 ? anyId(u(800 + i)) : u(800 + i) }
            : { type: 'deferred_tools_record', nameOnlyAnnouncements: [...ids.slice(-2), 'Tool'] } };
          break;
        case 'file-history-snapshot': lines.push(JSON.stringify({ type: t, messageId: u(i), snapshot: { timestamp: '2026-01-01T00:00:00.000Z' } })); continue;
        case 'custom-title': lines.push(JSON.stringify({ type: t, customTitle: pick(['T' + i, '']), sessionId: SID })); continue;
        case 'ai-title': lines.push(JSON.stringify({ type: t, aiTitle: 'AI' + i, sessionId: SID })); continue;
        case 'tag': lines.push(JSON.stringify({ type: t, tag: pick(['tag' + i, '']), sessionId: SID })); continue;
        case 'summary': lines.push(JSON.stringify({ type: t, summary: 'S' + i, leafUuid: u(1) })); continue;
        case 'last-prompt': lines.push(JSON.stringify({ type: t, lastPrompt: 'LP' + i, sessionId: SID })); continue;
        case 'relocated': lines.push(JSON.stringify({ type: t, relocatedCwd: '/r' + i, sessionId: pick([SID, OTHER]) })); continue;
        case 'queue-operation': lines.push(JSON.stringify({ type: t, operation: 'enqueue', timestamp: `2026-01-01T00:00:0${i % 10}Z`, sessionId: SID })); continue;
      }
      o.uuid = id;
      if (rnd() < 0.9) o.timestamp = `2026-03-01T10:00:${String(i % 60).padStart(2, '0')}.000Z`;
      if (rnd() < 0.1) { o.teamName = 't'; o.slug = 's'; }
      ids.push(id);
      let line = JSON.stringify(o);
      if (rnd() < 0.04) line = line.slice(0, Math.floor(rnd() * line.length));
      lines.push(line);
    }
    const text = lines.join('\n') + (rnd() < 0.9 ? '\n' : '');
    const opts = {};
    if (rnd() < 0.75) opts.upToMessageId = rnd() < 0.8 && ids.length ? pick(ids) : u(800 + Math.floor(rnd() * n));
    if (rnd() < 0.2) opts.title = ' T ';
    out.push({ text, opts });
  }
  return out;
}

async function genRandom() {
  const cases = [];
  for (const { text, opts } of randomTranscripts(400, 20240611)) {
    const buf = Buffer.from(text);
    const rec = { text, opts };
    await withSession(SID, buf, async (dir, file, pdir) => {
      try {
        const r = await sdk.forkSession(SID, { dir, ...opts });
        rec.fork = normalizeNew(fs.readFileSync(path.join(pdir, `${r.sessionId}.jsonl`), 'utf8'), buf);
        fs.rmSync(path.join(pdir, `${r.sessionId}.jsonl`));
      } catch (e) {
        rec.error = e.message;
      }
      const info = await sdk.getSessionInfo(SID, { dir });
      if (info) {
        delete info.lastModified;
        if (info.cwd === dir) info.cwd = '<project>';
      }
      rec.info = info ?? null;
    });
    cases.push(rec);
  }
  fs.writeFileSync(path.join(forkDir, 'random.json.gz'), zlib.gzipSync(JSON.stringify({ sdkVersion, cases }), { level: 9 }));
  console.log(`random: ${cases.length} cases`);
}

// ---- fork goldens ----

async function genFork() {
  const inputs = readInputs(path.join(forkDir, 'synthetic'), forkSynthetic());
  const cases = [];
  for (const { input, buf } of inputs) {
    const sid = input.startsWith('synthetic:') ? SID : sessionIdOf(input, buf);
    const ids = messageUuids(buf);
    cases.push(await forkCase(input, buf, sid, 'full', {}));
    cases.push(await forkCase(input, buf, sid, 'title', { title: '  An explicit title \u2713  ' }));
    if (ids.length > 0) {
      cases.push(await forkCase(input, buf, sid, 'mid', { upToMessageId: ids[Math.floor(ids.length / 2)] }));
      cases.push(await forkCase(input, buf, sid, 'end', { upToMessageId: ids.at(-1) }));
    }
    cases.push(await forkCase(input, buf, sid, 'unknown', { upToMessageId: u(424242) }));
  }
  for (const [name, opts] of [
    ['by-source-uuid', { upToMessageId: u(77) }],
    ['at-progress', { upToMessageId: u(7) }],
    ['at-attachment', { upToMessageId: u(10) }],
  ]) {
    const buf = fs.readFileSync(path.join(forkDir, 'synthetic', 'features.jsonl'));
    cases.push(await forkCase('synthetic:features.jsonl', buf, SID, name, opts));
  }
  for (const [name, upTo] of [['at-anchor', u(6)], ['at-boundary', u(5)], ['at-second-boundary', u(8)], ['at-trailing-progress', u(9)], ['at-first', u(1)]]) {
    const buf = fs.readFileSync(path.join(forkDir, 'synthetic', 'compaction.jsonl'));
    cases.push(await forkCase('synthetic:compaction.jsonl', buf, SID, name, { upToMessageId: upTo }));
  }
  const data = { sdkVersion, fixedTime: new RealDate(FIXED_TIME).toISOString(), cases };
  fs.writeFileSync(path.join(forkDir, 'goldens.json.gz'), zlib.gzipSync(JSON.stringify(data, null, 1), { level: 9 }));
  console.log(`fork: ${cases.length} cases`);
}

// ---- summary and metadata goldens ----

const TITLES = ['Plain title', '  padded title \t\n', 'quote " backslash \\ <html> & \u00fcn\u00efc\u00f6d\u00e9 \u{1F389}',
  'controls \u0001\u001f\u007f \u2028 \u2029 end', '', '   \n '];
const TAGS = ['simple', '  spaced  ', '\uFB01nal', 'zero\u200Bwidth', '\uFF21\uFF42\uFF43', '\uE000private', null, '', '   ', '\u200B', 'caf\u0065\u0301'];

async function appended(sid, buf, ops) {
  return withSession(sid, buf, async (dir, file) => {
    const errors = [];
    for (const [op, arg] of ops) {
      try {
        if (op === 'rename') await sdk.renameSession(sid, arg, { dir });
        else await sdk.tagSession(sid, arg, { dir });
      } catch (e) {
        errors.push(e.message);
      }
    }
    const after = fs.readFileSync(file);
    return { suffix: after.subarray(buf.length).toString('utf8'), errors };
  });
}

async function info(sid, buf) {
  return withSession(sid, buf, async (dir) => {
    const one = await sdk.getSessionInfo(sid, { dir });
    const list = await sdk.listSessions({ dir });
    const human = await sdk.listSessions({ dir, includeProgrammatic: false });
    const strip = (x) => {
      if (!x) return null;
      const { lastModified, ...rest } = x;
      return rest;
    };
    return {
      projectPath: dir, info: strip(one), listed: list.some((x) => x.sessionId === sid), list: strip(list.find((x) => x.sessionId === sid)),
      listedHuman: human.some((x) => x.sessionId === sid),
    };
  });
}

async function genSummary() {
  const inputs = readInputs(path.join(here, 'synthetic'), summarySynthetic());
  const cases = [];
  const variants = [
    ['plain', []],
    ['renamed', [['rename', 'Renamed: \u00fcn\u00efc\u00f6d\u00e9 "quoted" \u2713'], ['tag', 'release-1']]],
    ['cleared', [['rename', 'First'], ['tag', 'old'], ['rename', 'Second'], ['tag', null]]],
  ];
  for (const { input, buf } of inputs) {
    const sid = input.startsWith('synthetic:') ? SID : sessionIdOf(input, buf);
    for (const [variant, ops] of variants) {
      if (variant !== 'plain' && input.startsWith('synthetic:') && !['titles', 'torn-splice', 'big-middle-title', 'window-edges'].some((n) => input.includes(n))) continue;
      const { suffix } = ops.length ? await appended(sid, buf, ops) : { suffix: '' };
      const full = Buffer.concat([buf, Buffer.from(suffix, 'utf8')]);
      const r = await info(sid, full);
      // The project path is a temporary folder: record it as a marker.
      const fix = (x) => x && { ...x, cwd: x.cwd === r.projectPath ? '<project>' : x.cwd };
      cases.push({ input, sessionId: sid, variant, ops, suffix, info: fix(r.info), listed: r.listed, listedHuman: r.listedHuman, list: fix(r.list) });
    }
  }
  const meta = { titles: [], tags: [] };
  const metaSid = '12345678-9abc-4def-8123-456789abcdef';
  for (const t of TITLES) {
    const { suffix, errors } = await appended(metaSid, Buffer.from('{"type":"user"}\n'), [['rename', t]]);
    meta.titles.push({ input: t, line: suffix.replace(/\n$/, ''), error: errors[0] ?? '' });
  }
  for (const t of TAGS) {
    const { suffix, errors } = await appended(metaSid, Buffer.from('{"type":"user"}\n'), [['tag', t]]);
    meta.tags.push({ input: t, line: suffix.replace(/\n$/, ''), error: errors[0] ?? '' });
  }
  const data = { sdkVersion, sessionId: metaSid, cases, meta };
  fs.writeFileSync(path.join(here, 'goldens.json'), JSON.stringify(data, null, 1) + '\n');
  console.log(`summary: ${cases.length} cases`);
}

await genFork();
await genRandom();
await genSummary();
