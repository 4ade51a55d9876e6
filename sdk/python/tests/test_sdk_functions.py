"""The official Python SDK's store-backed session functions give the same
answers over SessiondStore as over the SDK's own InMemorySessionStore, on
the real transcripts in ../shared/fixtures: import, list, info, messages,
subagents, rename, tag, fork, materialize (resume from a store) and delete."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import REPO, run, short_tmp
from _sdk import load_sdk

FIXTURES = Path(os.environ.get("SESSIOND_FIXTURES") or REPO.parent / "shared" / "fixtures")
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def _config_dir(base: Path, project_key: str) -> list:
    """Lays the fixtures out as Claude Code does under base/projects and
    returns the session ids (sessions whose main transcript is a fixture,
    and sessions known only by their subagents)."""
    proj = base / "projects" / project_key
    proj.mkdir(parents=True)
    sessions = set()
    for f in sorted(FIXTURES.glob("*.jsonl")):
        name = f.name[: -len(".jsonl")]
        m = re.fullmatch(r".*__(%s)(?:\.TRUNCATED)?(?:__(subagents__.+))?" % UUID, name)
        if not m:
            continue
        sid, sub = m.group(1), m.group(2)
        if sub:
            dst = proj / sid / (sub.replace("__", "/") + ".jsonl")
        else:
            dst = proj / (sid + ".jsonl")
        dst.parent.mkdir(parents=True, exist_ok=True)
        data = f.read_bytes()
        if ".TRUNCATED" in name:
            # Cut short by its publisher: its last line is half a line,
            # which the SDK's import refuses.
            data = data[: data.rstrip(b"\n").rfind(b"\n") + 1]
        dst.write_bytes(data)
        if not sub:
            sessions.add(sid)
    return sorted(sessions)


def _strip(obj):
    """What may differ between two correct stores: when they stored a
    session (mtimes)."""
    if isinstance(obj, list):
        return [_strip(x) for x in obj]
    if hasattr(obj, "__dataclass_fields__"):
        obj = {k: getattr(obj, k) for k in obj.__dataclass_fields__}
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in ("last_modified", "mtime")}
    return obj


def test_store_functions_match_the_in_memory_store(daemon, monkeypatch):
    sdk = load_sdk()
    if not FIXTURES.is_dir():
        pytest.skip("no fixtures at %s" % FIXTURES)
    from sessiond_store import SessiondStore

    base = Path(short_tmp("sdpy-fx-"))
    workdir = base / "work"
    workdir.mkdir()
    directory = str(workdir)
    project_key = sdk.project_key_for_directory(directory)
    sessions = _config_dir(base / "config", project_key)
    assert len(sessions) >= 3, sessions
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(base / "config"))

    async def answers(store):
        out = {}
        for sid in sessions:
            await sdk.import_session_to_store(sid, store, directory=directory)
        out["list"] = sorted(
            (await sdk.list_sessions_from_store(store, directory=directory)), key=lambda s: s.session_id
        )
        for sid in sessions:
            out["info", sid] = await sdk.get_session_info_from_store(store, sid, directory=directory)
            out["messages", sid] = await sdk.get_session_messages_from_store(store, sid, directory=directory)
            agents = await sdk.list_subagents_from_store(store, sid, directory=directory)
            out["subagents", sid] = sorted(agents)
            for a in sorted(agents):
                out["agent", sid, a] = await sdk.get_subagent_messages_from_store(store, sid, a, directory=directory)
        first = sessions[0]
        await sdk.rename_session_via_store(store, first, "renamed by the test", directory=directory)
        await sdk.tag_session_via_store(store, first, "kit", directory=directory)
        out["info after rename and tag"] = await sdk.get_session_info_from_store(store, first, directory=directory)
        forked = await sdk.fork_session_via_store(store, first, directory=directory, title="forked")
        fork_msgs = await sdk.get_session_messages_from_store(store, forked.session_id, directory=directory)
        # A fork's ids are fresh: compare its shape, not its uuids.
        out["fork"] = [(m.type, m.parent_tool_use_id) for m in fork_msgs]
        out["fork info title"] = (await sdk.get_session_info_from_store(store, forked.session_id, directory=directory)).custom_title
        out["materialized", first] = await _materialize(sdk, store, first, directory)
        await sdk.delete_session_via_store(store, first, directory=directory)
        out["after delete"] = sorted(
            "<the fork>" if s.session_id == forked.session_id else s.session_id
            for s in await sdk.list_sessions_from_store(store, directory=directory)
        )
        out["info after delete"] = await sdk.get_session_info_from_store(store, first, directory=directory)
        return out

    async def go():
        mem = await answers(sdk.InMemorySessionStore())
        store = SessiondStore(socket_path=daemon.socket)
        try:
            ours = await answers(store)
        finally:
            await store.close()
        return mem, ours

    try:
        mem, ours = run(go())
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert set(ours) == set(mem)
    for k in mem:
        assert _strip(ours[k]) == _strip(mem[k]), k
    # The comparison saw the fixtures' contents, not empty answers.
    assert all(mem["messages", s] for s in sessions)
    assert any(mem["subagents", s] for s in sessions)


def _fresh_ids_out(entry):
    """The entries rename and tag append get a fresh uuid and the time of
    the call: the same in both stores but for those two."""
    if entry.get("type") in ("custom-title", "tag"):
        return {k: v for k, v in entry.items() if k not in ("uuid", "timestamp")}
    return entry


async def _materialize(sdk, store, session_id, directory):
    """Resume from the store: the SDK writes the session to a temporary
    config folder for the CLI; what it wrote is the answer."""
    from claude_agent_sdk._internal.session_resume import materialize_resume_session

    options = sdk.ClaudeAgentOptions(session_store=store, resume=session_id, cwd=directory)
    m = await materialize_resume_session(options)
    assert m is not None
    try:
        root = Path(m.config_dir)
        files = {}
        for p in sorted(root.rglob("*.jsonl")):
            files[str(p.relative_to(root))] = [_fresh_ids_out(json.loads(line)) for line in p.read_text().splitlines()]
        return files
    finally:
        await m.cleanup()
