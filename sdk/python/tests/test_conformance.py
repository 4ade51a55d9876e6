"""The SessionStore conformance cases (docs/transcripts.md, (1) to (14)),
against a real sessiond."""

from __future__ import annotations

import time

from conftest import entry, key, run, sid


def test_01_append_then_load_is_deep_equal_and_ordered(new_store, project):
    async def go():
        store = new_store()
        s = sid()
        entries = [entry("one"), entry("two", isMeta=True), {"type": "summary", "summary": "s", "leafUuid": "x"}]
        await store.append(key(project, s), entries)
        assert await store.load(key(project, s)) == entries
        await store.close()

    run(go())


def test_02_unknown_session_or_subpath_loads_none(new_store, project):
    async def go():
        store = new_store()
        s = sid()
        assert await store.load(key(project, s)) is None
        assert await store.load(key(project, s, "subagents/agent-a1")) is None
        await store.append(key(project, s), [entry()])
        assert await store.load(key(project, s, "subagents/agent-a1")) is None
        assert await store.load(key("-tmp-sdpy-never-" + s[:8], s)) is None

    run(go())


def test_03_appends_load_concatenated_in_call_order(new_store, project):
    async def go():
        store = new_store()
        s = sid()
        batches = [[entry("a%d" % i), entry("b%d" % i)] for i in range(5)]
        for b in batches:
            await store.append(key(project, s), b)
        assert await store.load(key(project, s)) == [e for b in batches for e in b]

    run(go())


def test_04_empty_append_is_a_no_op(new_store, project):
    async def go():
        store = new_store()
        s = sid()
        await store.append(key(project, s), [])
        assert await store.load(key(project, s)) is None
        assert await store.list_sessions(project) == []

    run(go())


def test_04b_empty_append_makes_no_call(project):
    async def go():
        from sessiond_store import SessiondStore

        # A socket nobody serves: any call would fail.
        store = SessiondStore(socket_path="/nonexistent-sdpy/s.sock", fold=None)
        await store.append(key(project, sid()), [])

    run(go())


def test_05_subpath_is_stored_apart(new_store, project):
    async def go():
        store = new_store()
        s = sid()
        main = [entry("main")]
        sub = [entry("sub", isSidechain=True)]
        await store.append(key(project, s), main)
        await store.append(key(project, s, "subagents/agent-abc"), sub)
        assert await store.load(key(project, s)) == main
        assert await store.load(key(project, s, "subagents/agent-abc")) == sub

    run(go())


def test_06_same_session_id_under_two_projects(new_store, project):
    async def go():
        store = new_store()
        s = sid()
        other = project + "-other"
        await store.append(key(project, s), [entry("p1")])
        await store.append(key(other, s), [entry("p2")])
        assert (await store.load(key(project, s)))[0]["message"]["content"] == "p1"
        assert (await store.load(key(other, s)))[0]["message"]["content"] == "p2"
        assert [x["session_id"] for x in await store.list_sessions(project)] == [s]
        assert [x["session_id"] for x in await store.list_sessions(other)] == [s]

    run(go())


def test_07_list_sessions_exact_ids_epoch_ms(new_store, project):
    async def go():
        store = new_store()
        ids = [sid() for _ in range(3)]
        before = time.time() * 1000 - 5000
        for s in ids:
            await store.append(key(project, s), [entry()])
        await store.append(key(project + "-x", sid()), [entry()])
        listed = await store.list_sessions(project)
        assert sorted(x["session_id"] for x in listed) == sorted(ids)
        for x in listed:
            assert set(x) == {"session_id", "mtime"}
            assert isinstance(x["mtime"], int) and x["mtime"] > 1e12 and x["mtime"] >= before
        assert await store.list_sessions("-tmp-sdpy-unknown-" + ids[0][:8]) == []

    run(go())


def test_08_sessions_with_only_subpaths_are_not_listed(new_store, project):
    async def go():
        store = new_store()
        s, t = sid(), sid()
        await store.append(key(project, s, "subagents/agent-only"), [entry(isSidechain=True)])
        await store.append(key(project, t), [entry()])
        assert [x["session_id"] for x in await store.list_sessions(project)] == [t]

    run(go())


def test_09_delete_never_written_then_load_none(new_store, project):
    async def go():
        store = new_store()
        s = sid()
        await store.delete(key(project, s))
        await store.delete(key(project, s, "subagents/agent-x"))
        await store.append(key(project, s), [entry()])
        await store.delete(key(project, s))
        assert await store.load(key(project, s)) is None

    run(go())


def test_10_delete_main_cascades(new_store, project):
    async def go():
        store = new_store()
        s, keep = sid(), sid()
        other = project + "-o"
        await store.append(key(project, s), [entry()])
        await store.append(key(project, s, "subagents/agent-1"), [entry(isSidechain=True)])
        await store.append(key(project, s, "subagents/workflows/r1/agent-2"), [entry(isSidechain=True)])
        await store.append(key(project, keep), [entry()])
        await store.append(key(project, keep, "subagents/agent-k"), [entry(isSidechain=True)])
        await store.append(key(other, s), [entry()])
        await store.delete(key(project, s))
        assert await store.load(key(project, s)) is None
        assert await store.load(key(project, s, "subagents/agent-1")) is None
        assert await store.load(key(project, s, "subagents/workflows/r1/agent-2")) is None
        assert await store.list_subkeys(key(project, s)) == []
        assert [x["session_id"] for x in await store.list_sessions(project)] == [keep]
        assert await store.list_subkeys(key(project, keep)) == ["subagents/agent-k"]
        assert await store.load(key(other, s)) is not None
        assert [x["session_id"] for x in await store.list_sessions(other)] == [s]

    run(go())


def test_11_delete_one_subpath_keeps_siblings(new_store, project):
    async def go():
        store = new_store()
        s = sid()
        main = [entry()]
        await store.append(key(project, s), main)
        for name in ("a", "b", "c"):
            await store.append(key(project, s, "subagents/agent-" + name), [entry(name, isSidechain=True)])
        await store.delete(key(project, s, "subagents/agent-b"))
        assert await store.load(key(project, s, "subagents/agent-b")) is None
        assert await store.load(key(project, s)) == main
        assert sorted(await store.list_subkeys(key(project, s))) == ["subagents/agent-a", "subagents/agent-c"]

    run(go())


def test_12_list_subkeys_only_this_session(new_store, project):
    async def go():
        store = new_store()
        s, t = sid(), sid()
        await store.append(key(project, s), [entry()])
        await store.append(key(project, s, "subagents/agent-s1"), [entry(isSidechain=True)])
        await store.append(key(project, s, "subagents/workflows/w/agent-s2"), [entry(isSidechain=True)])
        await store.append(key(project, t, "subagents/agent-t1"), [entry(isSidechain=True)])
        assert sorted(await store.list_subkeys(key(project, s))) == [
            "subagents/agent-s1",
            "subagents/workflows/w/agent-s2",
        ]
        assert await store.list_subkeys(key(project, t)) == ["subagents/agent-t1"]

    run(go())


def test_13_list_subkeys_excludes_main_unknown_empty(new_store, project):
    async def go():
        store = new_store()
        s = sid()
        await store.append(key(project, s), [entry()])
        assert await store.list_subkeys(key(project, s)) == []
        assert await store.list_subkeys(key(project, sid())) == []
        assert await store.list_subkeys(key("-tmp-sdpy-nope-" + s[:6], s)) == []

    run(go())


def counting_fold(prev, key, entries):
    data = dict(prev["data"]) if prev else {}
    data["count"] = data.get("count", 0) + len(entries)
    data.setdefault("first", entries[0].get("message", {}).get("content"))
    data["opaque"] = {"nested": [1, "two", None, True, 1.5], "é": "\u2028"}
    return {"session_id": key["session_id"], "mtime": 0, "data": data}


def test_14_summaries(new_store, project):
    async def go():
        store = new_store(fold=counting_fold)
        s, t = sid(), sid()
        other = project + "-z"
        await store.append(key(project, s), [entry("first"), entry()])
        await store.append(key(project, s), [entry()])
        await store.append(key(project, t), [entry("tee")])
        await store.append(key(other, sid()), [entry()])

        summaries = await store.list_session_summaries(project)
        assert sorted(x["session_id"] for x in summaries) == sorted([s, t])
        by_id = {x["session_id"]: x for x in summaries}
        assert by_id[s]["data"] == {
            "count": 3,
            "first": "first",
            "opaque": {"nested": [1, "two", None, True, 1.5], "é": "\u2028"},
        }
        assert by_id[t]["data"]["count"] == 1
        mtimes = {x["session_id"]: x["mtime"] for x in await store.list_sessions(project)}
        for x in summaries:
            assert set(x) == {"session_id", "mtime", "data"}
            assert x["mtime"] >= mtimes[x["session_id"]] > 1e12

        # A subagent append leaves the summary as it was.
        await store.append(key(project, s, "subagents/agent-q"), [entry(isSidechain=True)])
        again = {x["session_id"]: x for x in await store.list_session_summaries(project)}
        assert again[s]["data"] == by_id[s]["data"]

        await store.delete(key(project, s))
        assert [x["session_id"] for x in await store.list_session_summaries(project)] == [t]
        await store.delete(key(project, t))
        assert await store.list_session_summaries(project) == []
        assert await store.list_session_summaries("-tmp-sdpy-none-" + s[:6]) == []

    run(go())
