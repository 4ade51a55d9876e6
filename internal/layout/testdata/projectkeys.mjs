// Golden data for ProjectKeyFromCwd: the Claude Agent SDK's project-key
// derivation applied to the cases below, written to stdout as JSON.
//
//   go test ./internal/layout -run TestProjectKeyGolden -update   # rewrites projectkeys.json
//   node testdata/projectkeys.mjs --paths /some/dir ...            # keys of real folders, this platform
//
// The SDK does not export these functions, so they are restated below from
// @anthropic-ai/claude-agent-sdk 0.3.329, file core-4c8nqa7k.mjs (the same
// code is bundled into sdk.mjs under other minified names: fR, yDe, wa, Ta):
//
//   function vu(e){let m=0;for(let P=0;P<e.length;P++)m=(m<<5)-m+e.charCodeAt(P)|0;return m}
//   var Ae=200;function yf(e){return Math.abs(vu(e)).toString(36)}
//   function it(e){return e.replace(/[^a-zA-Z0-9]/g,"-")}
//   function xe(e){let m=it(e);if(m.length<=Ae)return m;return`${m.slice(0,Ae)}-${yf(e)}`}
//   import{realpathSync as bf}from"fs";import{isAbsolute as _f,relative as kf,resolve as vf,sep as xf}from"path";
//   function Cf(e){let m=vf(e??"."),P;try{P=bf(m)}catch{P=m}return E(P)}
//   function E(e){return process.platform==="darwin"?e.normalize("NFC"):e}
//   function B(e,m){let P=Cf(e);if(m===void 0)return De(P);return(...)??xe(P)}   // key of a directory
//
// When the SDK is installed (SDK_DIR, default /tmp/sdk/node_modules/@anthropic-ai/claude-agent-sdk),
// the minified hash and key functions are also pulled out of its files and run on every case;
// a difference from the restatement aborts the script.
import fs from "node:fs";
import path from "node:path";

// --- the SDK's algorithm, restated ---------------------------------------

function hash(s) {
  let h = 0;
  for (let i = 0; i < s.length; i++) h = ((h << 5) - h + s.charCodeAt(i)) | 0;
  return h;
}

const MAX_PREFIX = 200;

function key(p) {
  const k = p.replace(/[^a-zA-Z0-9]/g, "-");
  if (k.length <= MAX_PREFIX) return k;
  return `${k.slice(0, MAX_PREFIX)}-${Math.abs(hash(p)).toString(36)}`;
}

// canonical is Cf with the platform made a parameter, so one run yields the
// keys of both Linux and macOS.
function canonical(dir, platform) {
  let p = path.resolve(dir ?? ".");
  try {
    p = fs.realpathSync(p);
  } catch {}
  return platform === "darwin" ? p.normalize("NFC") : p;
}

// --- cross-check against the installed SDK --------------------------------

function sdkFunctions() {
  const dir = process.env.SDK_DIR ?? "/tmp/sdk/node_modules/@anthropic-ai/claude-agent-sdk";
  let files;
  try {
    files = fs.readdirSync(dir).filter((f) => f.endsWith(".mjs"));
  } catch {
    return [];
  }
  const keyBlock =
    /var (\w+)=200;function (\w+)\(e\)\{return Math\.abs\((\w+)\(e\)\)\.toString\(36\)\}function (\w+)\(e\)\{return e\.replace\(\/\[\^a-zA-Z0-9\]\/g,"-"\)\}function (\w+)\(e\)\{let (\w+)=\4\(e\);if\(\6\.length<=\1\)return \6;return`\$\{\6\.slice\(0,\1\)\}-\$\{\2\(e\)\}`\}/;
  const found = [];
  for (const f of files) {
    const src = fs.readFileSync(path.join(dir, f), "utf8");
    const m = keyBlock.exec(src);
    if (!m) continue;
    const hashName = m[3];
    const h = new RegExp(`function ${hashName.replace(/\$/g, "\\$")}\\(e\\)\\{let (\\w+)=0;for\\(let (\\w+)=0;\\2<e\\.length;\\2\\+\\+\\)\\1=\\(\\1<<5\\)-\\1\\+e\\.charCodeAt\\(\\2\\)\\|0;return \\1\\}`).exec(src);
    if (!h) throw new Error(`${f}: key function found but not its hash function ${hashName}`);
    const fn = new Function(`${h[0]}${m[0]}return {hash: ${hashName}, key: ${m[5]}};`)();
    found.push({ file: f, source: `${h[0]}${m[0]}`, ...fn });
  }
  return found;
}

// --- cases -----------------------------------------------------------------

// G does not exist, so realpath fails and the resolved path is kept, on
// every machine: the golden keys do not depend on the local filesystem.
const G = "/nonexistent-sessiond-golden";
if (fs.existsSync(G)) throw new Error(`${G} exists; the golden cases need it absent`);

function ofLength(n, filler = "a") {
  const p = `${G}/${filler.repeat(n)}`.slice(0, n);
  if (p.length !== n) throw new Error(`cannot build a path of ${n} code units`);
  return p;
}

// A path whose hash is exactly -2^31, found by a meet-in-the-middle search
// over the last 8 characters.
function minInt32Path() {
  let p = `${G}/hash-min-int32/`;
  while (p.length < 230) p += "x";
  return `${p}/acdnv224`;
}

const straddle = (() => {
  // An astral character whose two code units sit at 199 and 200: the cut
  // keeps the first of its two '-'.
  const head = `${G}/`;
  return head + "b".repeat(199 - head.length) + "\u{1F600}tail";
})();

const cases = [
  { name: "root", path: "/" },
  { name: "plain", path: `${G}/home/user/project` },
  { name: "dots underscores spaces", path: `${G}/my_project v2.0/.hidden dir/a-b` },
  { name: "unclean: dot segments, repeated and trailing slashes", path: `/${G}/a/./b/../c//` },
  { name: "only separators after resolve", path: `${G}/..` },
  { name: "BMP unicode (NFC)", path: `${G}/café/日本語/Ünïcödé` },
  { name: "NFD (darwin normalises to NFC)", path: `${G}/cafe\u0301/A\u030a` },
  { name: "astral emoji", path: `${G}/\u{1F389}party/\u{1D11E}` },
  { name: "control characters", path: `${G}/tab\there/new\nline` },
  { name: "replacement character", path: `${G}/\uFFFD` },
  { name: "199 code units", path: ofLength(199) },
  { name: "200 code units", path: ofLength(200) },
  { name: "201 code units", path: ofLength(201) },
  { name: "300 code units", path: ofLength(300) },
  { name: "1000 code units", path: ofLength(1000, "long/") },
  { name: "astral straddles the cut at 200", path: straddle },
  { name: "long BMP (hash over large code units)", path: `${G}/${"漢".repeat(300)}` },
  { name: "long astral", path: `${G}/${"\u{1F389}".repeat(150)}` },
  { name: "hash negative", path: `${G}/negative/${"n".repeat(200)}`, wantHash: (h) => h < 0 },
  { name: "hash positive", path: `${G}/positive/${"p".repeat(203)}`, wantHash: (h) => h > 0 },
  { name: "hash exactly -2^31", path: minInt32Path(), wantHash: (h) => h === -(2 ** 31) },
];

// --- output ------------------------------------------------------------------

const sdk = sdkFunctions();

function check(p) {
  for (const f of sdk) {
    if (f.hash(p) !== hash(p) || f.key(p) !== key(p)) {
      throw new Error(`restatement differs from ${f.file} for ${JSON.stringify(p)}:\n${f.source}`);
    }
  }
}

const args = process.argv.slice(2);
if (args[0] === "--paths") {
  const out = args.slice(1).map((p) => {
    const c = canonical(p, process.platform);
    check(c);
    return { path: p, canonical: c, key: key(c) };
  });
  process.stdout.write(JSON.stringify(out, null, 2) + "\n");
} else {
  const out = cases.map(({ name, path: p, wantHash }) => {
    const c = canonical(p, "linux");
    const d = canonical(p, "darwin");
    check(c);
    check(d);
    const h = hash(c);
    if (wantHash && !wantHash(h)) throw new Error(`case ${name}: hash ${h} is not what the case needs`);
    return { name, path: p, canonical: c, hash: h, key: key(c), darwinKey: key(d) };
  });
  const doc = {
    comment: "Generated by projectkeys.mjs (go test -run TestProjectKeyGolden -update); do not edit.",
    node: process.version,
    checkedAgainst: sdk.map((f) => f.file),
    cases: out,
  };
  process.stdout.write(JSON.stringify(doc, null, 2) + "\n");
}
