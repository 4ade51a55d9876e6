"""driver.py runs the vendored Python Agent SDK with the real Claude Code CLI
for sessiond's end-to-end tests (e2e/clisdk_test.go), as
sdk/typescript/test/agent/driver.mjs does for the TypeScript SDK. It takes one
JSON argument and prints one JSON line per event, so the Go test decides what
is right.

  {"op": "turn", "socket", "cwd", "home", "baseURL", "cli", "prompt",
   "resume"?, "flush"?: "batched"|"eager"}
    On defaults: no CLAUDE_CONFIG_DIR (the Go test unsets it and sets HOME
    for this process too), so the CLI and the store both take ~/.claude.
    prints {"module": path} (where sessiond_store was imported from),
    {"appended": {subpath, entries}} for each batch the SDK mirrors, before
    it is sent, {"msg": {type, subtype, session_id, is_error, error}} for
    each message, then {"end": {"session_id", "error"?}}.
  {"op": "functions", "socket", "root", "cwd", "sessionId"}
    prints {"store": {...}, "disk": {...}}: what the SDK's list_sessions,
    get_session_info, get_session_messages, list_subagents and
    get_subagent_messages return with the store and reading the files
    sessiond wrote under root.

sessiond_store is imported from wherever the interpreter finds it: the Go
test runs this with a venv's python where the wheel is installed, as the
adapter's README says. The SDK is the vendored one (PYTHONPATH), with the
tests' stand-in for the mcp names it imports (Debian 12 has no python3-mcp).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _sdk import _install_mcp_standin  # noqa: E402

_install_mcp_standin()

import claude_agent_sdk  # noqa: E402
from claude_agent_sdk import ClaudeAgentOptions, query  # noqa: E402

import sessiond_store  # noqa: E402
from sessiond_store import SessiondStore  # noqa: E402

cfg = json.loads(sys.argv[1])


def out(o) -> None:
    sys.stdout.write(json.dumps(o, ensure_ascii=False) + "\n")
    sys.stdout.flush()


async def turn() -> None:
    out({"module": os.path.realpath(sessiond_store.__file__)})
    store = SessiondStore(socket_path=cfg["socket"])
    append = store.append

    async def reporting_append(key, entries):
        # What the SDK mirrors, for the test to compare with the transcript.
        out({"appended": {"subpath": key.get("subpath") or "", "entries": entries}})
        return await append(key, entries)

    store.append = reporting_append
    env = {
        "ANTHROPIC_BASE_URL": cfg["baseURL"],
        "ANTHROPIC_API_KEY": "sk-test",
        "HOME": cfg["home"],
        "CLAUDE_CODE_TMPDIR": cfg["home"],
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    session_id = cfg.get("resume") or ""
    try:
        options = ClaudeAgentOptions(
            cwd=cfg["cwd"],
            env=env,
            cli_path=cfg["cli"],
            allowed_tools=["Bash", "Agent", "Task"],
            session_store=store,
            session_store_flush=cfg.get("flush") or "batched",
            resume=cfg.get("resume"),
        )
        async for m in query(prompt=cfg["prompt"], options=options):
            sid = getattr(m, "session_id", None)
            if sid:
                session_id = sid
            data = getattr(m, "data", None) or {}
            out({"msg": {
                "type": type(m).__name__,
                "subtype": getattr(m, "subtype", "") or "",
                "session_id": sid or "",
                "is_error": bool(getattr(m, "is_error", False)),
                "error": str(data.get("error", "")) if isinstance(data, dict) else "",
            }})
        out({"end": {"session_id": session_id}})
    except Exception as e:  # the Go side reports it
        # With where it was raised: an SDK's failure is often in a dependency.
        where = traceback.format_exception(e)[-3:]
        out({"end": {"session_id": session_id, "error": "%s: %s\n%s" % (type(e).__name__, e, "".join(where))}})
    finally:
        await store.close()


def plain(v):
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {k: plain(x) for k, x in dataclasses.asdict(v).items()}
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v


async def functions() -> None:
    sdk = claude_agent_sdk
    store = SessiondStore(socket_path=cfg["socket"])
    sid, cwd = cfg["sessionId"], cfg["cwd"]
    try:
        s = {
            "listSessions": await sdk.list_sessions_from_store(store, directory=cwd),
            "info": await sdk.get_session_info_from_store(store, sid, directory=cwd),
            "messages": await sdk.get_session_messages_from_store(store, sid, directory=cwd),
            "subagents": sorted(await sdk.list_subagents_from_store(store, sid, directory=cwd)),
        }
        s["subagentMessages"] = {
            a: await sdk.get_subagent_messages_from_store(store, sid, a, directory=cwd) for a in s["subagents"]
        }
    finally:
        await store.close()
    # The disk readers take the config dir from the environment.
    os.environ["CLAUDE_CONFIG_DIR"] = cfg["root"]
    d = {
        "listSessions": sdk.list_sessions(directory=cwd),
        "info": sdk.get_session_info(sid, directory=cwd),
        "messages": sdk.get_session_messages(sid, directory=cwd),
        "subagents": sorted(sdk.list_subagents(sid, directory=cwd)),
    }
    d["subagentMessages"] = {a: sdk.get_subagent_messages(sid, a, directory=cwd) for a in d["subagents"]}
    out({"store": plain(s), "disk": plain(d)})


asyncio.run(turn() if cfg["op"] == "turn" else functions())
