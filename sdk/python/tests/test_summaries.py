"""Session summaries: folded on each main append, stored with a
compare-and-swap, never losing a fold to a concurrent writer."""

from __future__ import annotations

import asyncio
import logging

import grpc
import grpc.aio
import pytest

from conftest import entry, key, run, sid
from sessiond_store import SessiondStore, SessiondUnavailableError


def count_fold(prev, key, entries):
    data = dict(prev["data"]) if prev else {}
    data["count"] = data.get("count", 0) + len(entries)
    data["batches"] = data.get("batches", 0) + 1
    return {"session_id": key["session_id"], "mtime": prev["mtime"] if prev else 0, "data": data}


async def summary_of(store, project, session_id):
    for s in await store.list_session_summaries(project):
        if s["session_id"] == session_id:
            return s["data"]
    return None


def test_second_store_folds_onto_the_first(new_store, project):
    """Store b has never seen the session: its first append conflicts, it
    fetches a's summary and folds onto it."""

    async def go():
        a, b = new_store(fold=count_fold), new_store(fold=count_fold)
        s = sid()
        await a.append(key(project, s), [entry(), entry()])
        await b.append(key(project, s), [entry()])
        await a.append(key(project, s), [entry()])  # a's cache is stale now
        assert await summary_of(a, project, s) == {"count": 4, "batches": 3}

    run(go())


def test_concurrent_stores_lose_no_fold(new_store, project):
    async def go():
        stores = [new_store(fold=count_fold) for _ in range(2)]
        s = sid()
        per_store = 25
        conflicts = []
        for st in stores:
            original = st._unary

            def counted(name, request, _original=original):
                invoke = _original(name, request)

                async def call(stub):
                    try:
                        return await invoke(stub)
                    except grpc.aio.AioRpcError as exc:
                        if exc.code() == grpc.StatusCode.ABORTED:
                            conflicts.append(request.batch_id)
                        raise

                return call

            st._unary = counted

        async def writer(store, n):
            for i in range(per_store):
                await store.append(key(project, s), [entry("%d-%d" % (n, i)) for _ in range(1 + i % 3)])

        await asyncio.gather(*(writer(st, n) for n, st in enumerate(stores)), writer(stores[0], 2))
        expected_entries = 3 * sum(1 + i % 3 for i in range(per_store))
        loaded = await stores[1].load(key(project, s))
        assert len(loaded) == expected_entries
        assert await summary_of(stores[1], project, s) == {"count": expected_entries, "batches": 3 * per_store}
        assert conflicts, "no SUMMARY_CONFLICT happened: the test proves nothing"

    run(go())


def test_concurrent_stores_in_two_event_loops(new_store, project):
    """Two stores in two threads (two event loops, two connections)."""
    import threading

    s = sid()
    errors = []

    def worker(n):
        async def go():
            store = new_store(fold=count_fold)
            for i in range(20):
                await store.append(key(project, s), [entry("%d-%d" % (n, i))])
            await store.close()

        try:
            asyncio.run(go())
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors

    async def check():
        store = new_store(fold=count_fold)
        assert await summary_of(store, project, s) == {"count": 40, "batches": 40}

    run(check())


def test_no_fold_no_summary(new_store, project):
    async def go():
        store = new_store(fold=None)
        s = sid()
        await store.append(key(project, s), [entry()])
        assert await store.list_session_summaries(project) == []

    run(go())


def test_sdk_fold_used_when_installed(monkeypatch):
    import sys
    import types

    fake = types.ModuleType("claude_agent_sdk")
    fake.fold_session_summary = count_fold
    monkeypatch.setitem(sys.modules, "claude_agent_sdk", fake)
    assert SessiondStore(socket_path="/x/s.sock").fold is count_fold
    assert SessiondStore(socket_path="/x/s.sock", fold=None).fold is None
    monkeypatch.setitem(sys.modules, "claude_agent_sdk", None)  # not installed
    assert SessiondStore(socket_path="/x/s.sock").fold is None


def test_async_fold(new_store, project):
    async def afold(prev, key, entries):
        await asyncio.sleep(0)
        return count_fold(prev, key, entries)

    async def go():
        store = new_store(fold=afold)
        s = sid()
        await store.append(key(project, s), [entry()])
        await store.append(key(project, s), [entry()])
        assert await summary_of(store, project, s) == {"count": 2, "batches": 2}

    run(go())


def test_oversized_summary_is_shortened(new_store, project):
    """A fold over sessiond's 32 KiB limit because of a long string (a huge
    prompt) is stored with that string shortened, not dropped (a dropped
    summary makes every later append refold the whole transcript)."""
    def huge_fold(prev, key, entries):
        return {"session_id": key["session_id"], "mtime": 0, "data": {"pad": "x" * (40 << 10), "title": "kept"}}

    async def go():
        store = new_store(fold=huge_fold)
        s = sid()
        e = entry()
        await store.append(key(project, s), [e])
        assert await store.load(key(project, s)) == [e]
        got = await summary_of(store, project, s)
        assert got["title"] == "kept" and 64 <= len(got["pad"]) < (32 << 10)

    run(go())


def test_oversized_summary_keeps_the_entries(new_store, project, caplog):
    """One that no shortening brings under the limit (no long string) is
    left out; the entries are stored all the same."""
    def huge_fold(prev, key, entries):
        return {"session_id": key["session_id"], "mtime": 0, "data": {"pad": list(range(20000))}}

    async def go():
        store = new_store(fold=huge_fold)
        s = sid()
        e = entry()
        with caplog.at_level(logging.WARNING, logger="sessiond_store"):
            await store.append(key(project, s), [e])
        assert await store.load(key(project, s)) == [e]
        assert "summary" in caplog.text

    run(go())


def test_summary_after_delete_and_rewrite(new_store, project):
    async def go():
        store = new_store(fold=count_fold)
        s = sid()
        await store.append(key(project, s), [entry(), entry()])
        await store.delete(key(project, s))
        assert await summary_of(store, project, s) is None
        other = new_store(fold=count_fold)
        await other.append(key(project, s), [entry()])
        assert await summary_of(store, project, s) == {"count": 1, "batches": 1}
        # The first store's cache was dropped on delete: no stale fold.
        await store.append(key(project, s), [entry()])
        assert await summary_of(store, project, s) == {"count": 2, "batches": 2}

    run(go())


def test_lost_answer_with_summary_folds_once(new_store, project):
    """The daemon stores a batch and its summary, the answer is lost, the
    store sends the same batch id again: the daemon must answer
    duplicate_batch (not SUMMARY_CONFLICT, which would fold the batch a
    second time)."""

    async def go():
        store = new_store(fold=count_fold, backoff=(0.05,))
        original = store._unary
        appends = []

        def lossy(name, request):
            invoke = original(name, request)

            async def call(stub):
                result = await invoke(stub)
                if name == "Append":
                    appends.append(request.batch_id)
                    if len(appends) == 1:
                        raise grpc.aio.AioRpcError(
                            grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "lost"
                        )
                return result

            return call

        store._unary = lossy
        s = sid()
        await store.append(key(project, s), [entry(), entry()])
        assert len(appends) == 2 and appends[0] == appends[1]
        assert await summary_of(store, project, s) == {"count": 2, "batches": 1}
        # The cache was dropped (the stored summary is unknown after a
        # duplicate): the next append refetches and folds onto it.
        await store.append(key(project, s), [entry()])
        assert await summary_of(store, project, s) == {"count": 3, "batches": 2}

    run(go())


def test_one_store_shared_by_two_threads(new_store, project):
    """One store used at once from two threads, each with its own event loop
    (each gets its own connection)."""
    import threading

    store = new_store(fold=count_fold)
    s = sid()
    errors = []

    def worker(n):
        async def go():
            for i in range(15):
                await store.append(key(project, s), [entry("%d-%d" % (n, i))])

        try:
            asyncio.run(go())
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors

    async def check():
        assert len(await store.load(key(project, s))) == 30
        assert await summary_of(store, project, s) == {"count": 30, "batches": 30}

    run(check())


def _append_raw(daemon, project, session_id, entries, summary=None, expected_version=0):
    from sessiond_store._encode import encode_entry
    from sessiond_store.gen import sessiond_pb2 as pb
    from sessiond_store.gen import sessiond_pb2_grpc as pb_grpc

    async def go():
        async with grpc.aio.insecure_channel("unix:" + daemon.socket) as channel:
            req = pb.AppendRequest(
                session=pb.SessionRef(project_key=project, session_id=session_id),
                entries=[encode_entry(e) for e in entries],
            )
            if summary is not None:
                req.summary.CopyFrom(pb.SummaryUpdate(data=encode_entry(summary), expected_version=expected_version))
            return await pb_grpc.SessiondStub(channel).Append(req)

    return go()


def test_first_summary_covers_what_the_session_already_holds(new_store, project, daemon):
    """Entries stored before any summary (another tool, a store without a
    fold): the first summary is folded from the whole transcript."""

    async def go():
        s = sid()
        await _append_raw(daemon, project, s, [entry(), entry(), entry()])
        store = new_store(fold=count_fold)
        await store.append(key(project, s), [entry()])
        assert await summary_of(store, project, s) == {"count": 4, "batches": 2}

    run(go())


def test_lines_appended_without_a_summary_are_folded_later(new_store, project):
    async def go():
        s = sid()
        a = new_store(fold=count_fold)
        plain = new_store(fold=None)
        await a.append(key(project, s), [entry()])
        await plain.append(key(project, s), [entry(), entry()])  # e.g. sessionctl tag
        # Folded onto a summary of 1 line while the transcript holds 3:
        # sessiond refuses it, and the store folds the whole transcript at
        # once (1 batch of 3 lines, then this one).
        await a.append(key(project, s), [entry()])
        assert await summary_of(a, project, s) == {"count": 4, "batches": 2}
        await a.append(key(project, s), [entry()])
        assert await summary_of(a, project, s) == {"count": 5, "batches": 3}
        assert len(await a.load(key(project, s))) == 5

    run(go())


def test_typescript_summary_is_not_listed_and_is_replaced(new_store, project, daemon):
    async def go():
        s = sid()
        ts_data = {"isSidechain": False, "firstPrompt": "hello", "firstPromptLocked": True}
        await _append_raw(daemon, project, s, [entry("hello")], summary=ts_data)
        store = new_store(fold=count_fold)
        assert await store.list_session_summaries(project) == []
        await store.append(key(project, s), [entry()])
        assert await summary_of(store, project, s) == {"count": 2, "batches": 2}

    run(go())


def test_appends_keep_call_order_when_not_awaited_one_by_one(new_store, project):
    async def go():
        store = new_store(fold=count_fold)
        s = sid()
        batches = [[entry("n%d" % i)] for i in range(40)]
        await asyncio.gather(*(store.append(key(project, s), b) for b in batches))
        loaded = await store.load(key(project, s))
        assert loaded == [b[0] for b in batches]
        assert await summary_of(store, project, s) == {"count": 40, "batches": 40}

    run(go())


def test_sdk_retry_of_a_stored_batch_is_stored_once(new_store, project):
    """The daemon stores the batch, but the append fails for the caller (its
    answer lost past our retries): the SDK calls append again with the same
    entries, which go under the same batch id and are not stored twice."""

    async def go():
        store = new_store(fold=count_fold, tries=1)
        original = store._unary
        ids = []

        def lossy(name, request):
            invoke = original(name, request)

            async def call(stub):
                result = await invoke(stub)
                if name == "Append":
                    ids.append(request.batch_id)
                    if len(ids) == 1:
                        raise grpc.aio.AioRpcError(
                            grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "lost"
                        )
                return result

            return call

        store._unary = lossy
        s = sid()
        batch = [{"type": "note", "n": 1}]  # no uuid: only the batch id protects it
        with pytest.raises(SessiondUnavailableError):
            await store.append(key(project, s), batch)
        await store.append(key(project, s), batch)  # the SDK's retry
        assert ids[0] == ids[1]
        assert await store.load(key(project, s)) == batch
        assert await summary_of(store, project, s) == {"count": 1, "batches": 1}
        await store.append(key(project, s), batch)  # after a success: a new batch
        assert ids[2] != ids[0]
        assert await store.load(key(project, s)) == batch + batch

    run(go())


def test_daemon_without_summaries(new_store, project):
    """A daemon that predates ListSummaries: appends carry no summary and
    list_session_summaries folds the transcripts."""

    async def go():
        store = new_store(fold=count_fold)
        original, original_pages = store._unary, store._pages
        sent_summary = []

        async def unimplemented(stub):
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNIMPLEMENTED, grpc.aio.Metadata(), grpc.aio.Metadata(), "unknown method"
            )

        def old_daemon(name, request):
            if name == "Append":
                sent_summary.append(request.HasField("summary"))
            return original(name, request)

        def old_daemon_pages(name, request, items):
            if name == "ListSummaries":
                return unimplemented
            return original_pages(name, request, items)

        store._unary, store._pages = old_daemon, old_daemon_pages
        s = sid()
        await store.append(key(project, s), [entry(), entry()])
        await store.append(key(project, s), [entry()])
        assert sent_summary == [False, False]
        listed = await store.list_session_summaries(project)
        assert [(x["session_id"], x["data"]) for x in listed] == [(s, {"count": 3, "batches": 1})]
        assert listed[0]["mtime"] > 1e12

    run(go())


def test_failing_fold_keeps_the_entries(new_store, project, caplog):
    calls = []

    def flaky(prev, key, entries):
        calls.append(len(entries))
        if len(calls) == 1:
            raise RuntimeError("fold bug")
        return count_fold(prev, key, entries)

    async def go():
        store = new_store(fold=flaky)
        s = sid()
        first, second = entry(), entry()
        with caplog.at_level(logging.WARNING, logger="sessiond_store"):
            await store.append(key(project, s), [first])
        assert "fold bug" in caplog.text
        assert await summary_of(store, project, s) is None
        await store.append(key(project, s), [second])  # folds the whole transcript, then the batch
        assert await store.load(key(project, s)) == [first, second]
        assert await summary_of(store, project, s) == {"count": 2, "batches": 2}

    run(go())


def test_summary_of_an_append_sent_in_parts(new_store, project):
    async def go():
        store = new_store(fold=count_fold, max_batch_bytes=600)
        s = sid()
        await store.append(key(project, s), [entry()])
        big = [entry("x" * 200) for _ in range(6)]
        await store.append(key(project, s), big)  # several requests
        await store.append(key(project, s), [entry()])
        assert len(await store.load(key(project, s))) == 8
        # One fold per append call, over all its entries; no refold of the
        # whole transcript was needed (that would reset batches to 1).
        assert await summary_of(store, project, s) == {"count": 8, "batches": 3}

    run(go())


def test_summary_reported_stale_after_lines_without_one(new_store, project):
    """Between a summary-less append (sessionctl tag, a store without a
    fold) and the next append with a summary, the stored summary misses
    lines: sessiond must then give it an mtime older than the session's,
    which is how the SDK knows to read the session itself."""

    async def go():
        s = sid()
        a = new_store(fold=count_fold)
        plain = new_store(fold=None)
        await a.append(key(project, s), [entry()])
        await asyncio.sleep(0.01)
        await plain.append(key(project, s), [entry(), entry()])
        session_mtime = {x["session_id"]: x["mtime"] for x in await a.list_sessions(project)}[s]
        summary_mtime = {x["session_id"]: x["mtime"] for x in await a.list_session_summaries(project)}[s]
        assert summary_mtime < session_mtime

    run(go())


def test_upper_case_session_id_folds_onto_the_stored_summary(new_store, project):
    """sessiond stores a session under its lower-case id: a store keyed
    by the upper-case id is the same session, and finds its summary."""

    async def go():
        a, b = new_store(fold=count_fold), new_store(fold=count_fold)
        s = sid()
        await a.append(key(project, s), [entry(), entry()])
        await b.append(key(project, s.upper()), [entry()])
        assert len(await a.load(key(project, s))) == 3
        assert len(await b.load(key(project, s.upper()))) == 3
        assert await summary_of(a, project, s) == {"count": 3, "batches": 2}

    run(go())


def test_missing_sdk_fold_is_said_once(new_store, monkeypatch, caplog):
    """Without the SDK's fold the default store keeps no summaries: it says
    so once per process (not silently, not at every store), and an explicit
    fold=None stays quiet."""
    import sessiond_store.store as store_mod

    monkeypatch.setattr(store_mod, "_sdk_fold", lambda: None)
    monkeypatch.setattr(store_mod, "_warned_no_fold", False)
    with caplog.at_level(logging.WARNING, logger="sessiond_store"):
        first = new_store(fold=store_mod.SDK_FOLD)
        new_store(fold=store_mod.SDK_FOLD)
        new_store(fold=None)
    said = [r for r in caplog.records if "cannot be imported" in r.getMessage()]
    assert first.fold is None
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
    assert "list_session_summaries" in said[0].getMessage()


# The Ruby half of test_python_and_ruby_keep_both_summaries: appends
# ARGV[3] (a JSON list of entries) through the Ruby adapter with the Ruby
# SDK's fold, then prints the adapter's summaries of the project and the
# Ruby SDK's own fold of every entry so far (ARGV[4]).
_RUBY_STEP = r"""
require 'json'
require 'set'
require 'claude_agent_sdk'
require 'sessiond_store'
socket, project, session, batch, all = ARGV
store = SessiondStore.new(socket_path: socket)
key = { 'project_key' => project, 'session_id' => session }
store.append(key, JSON.parse(batch))
sums = store.list_session_summaries(project).select { |s| s['session_id'] == session }
oracle = ClaudeAgentSDK.fold_session_summary(nil, key, JSON.parse(all))
puts JSON.generate({ 'summaries' => sums.map { |s| s['data'] }, 'oracle' => oracle['data'] })
store.close
"""


def test_python_and_ruby_keep_both_summaries(daemon, project):
    """One session appended by the Python and the Ruby adapters in turn,
    each with its own SDK's fold: each adapter lists its own SDK's summary of
    the whole transcript (sessiond keeps one per folder), never the other's,
    and neither refolds the other's away."""
    import json
    import os
    import subprocess
    from pathlib import Path

    from _sdk import REPO, load_sdk

    sdk = load_sdk()
    ruby_sdk = Path(os.environ.get("SESSIOND_SDK_RB_LIB") or REPO.parent / "shared" / "vendor" / "claude-agent-sdk-ruby" / "lib")
    assert (ruby_sdk / "claude_agent_sdk.rb").is_file(), "the vendored Ruby Agent SDK is not at %s" % ruby_sdk
    stand_in = REPO / "sdk" / "ruby" / "test" / "support" / "stand_in"
    s = sid()
    k = key(project, s)
    batches = [
        [entry("first prompt, from python"), entry("more", type="assistant")],
        [entry("a ruby turn", gitBranch="ruby-branch")],
        [entry("python again")],
        [entry("ruby again"), {"type": "custom-title", "customTitle": "Both SDKs", "sessionId": s}],
    ]
    appended = []

    def ruby_step(batch):
        appended.extend(batch)
        out = subprocess.run(
            [os.environ.get("RUBY", "ruby"), "-I", str(REPO / "sdk" / "ruby" / "lib"), "-I", str(ruby_sdk),
             "-e", "$LOAD_PATH.push(%r)" % str(stand_in), "-e", _RUBY_STEP, "--",
             daemon.socket, project, s, json.dumps(batch), json.dumps(appended)],
            capture_output=True, text=True, timeout=120,
        )
        assert out.returncode == 0, "ruby step failed: %s" % out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    async def python_step(batch):
        appended.extend(batch)
        store = SessiondStore(socket_path=daemon.socket)
        assert store.fold is sdk.fold_session_summary
        await store.append(k, batch)
        got = await summary_of(store, project, s)
        await store.close()
        return got

    for i, batch in enumerate(batches):
        if i % 2 == 0:
            got = run(python_step(batch))
            want = sdk.fold_session_summary(None, k, list(appended))["data"]
            assert got == want, "python's summary after step %d: %r, want its SDK's fold of every entry %r" % (i, got, want)
        else:
            res = ruby_step(batch)
            assert res["summaries"] == [res["oracle"]], "ruby's summary after step %d: %r, want %r" % (i, res["summaries"], res["oracle"])
    # Python's summary, untouched by Ruby's last append, is behind by one
    # batch; listed, it is its own SDK's fold still (the SDK refolds a stale
    # one from the transcript at its next append).
    async def final():
        store = SessiondStore(socket_path=daemon.socket)
        listed = await store._list_summaries(project, s)
        await store.close()
        return listed

    listed = run(final())
    assert [x.folder for x in listed] == ["claude-agent-sdk-python"]
    assert json.loads(listed[0].data) == sdk.fold_session_summary(None, k, appended[:4])["data"]
    assert listed[0].covers_entries == 4 and listed[0].entries == 6
    # Two Python appends, two versions: Ruby's appends never replaced it.
    assert listed[0].version == 2


def test_failing_summary_read_keeps_the_entries(new_store, project, caplog):
    """A read of the transcript to fold onto that fails (a damaged journal
    record, the daemon out of descriptors) must not keep the batch from
    being stored: the entries go without a summary, and the next append
    folds the whole transcript."""

    async def go():
        s = sid()
        first, second, third, fourth = entry(), entry(), entry(), entry()
        await new_store(fold=None).append(key(project, s), [first, second])
        a = new_store(fold=count_fold)
        await a.list_sessions(project)  # connected
        stub = a._conn().stub
        real_read = stub.Read

        def failing_read(request, timeout=None):
            async def fail():
                raise grpc.aio.AioRpcError(grpc.StatusCode.DATA_LOSS, grpc.aio.Metadata(), grpc.aio.Metadata(), "a journal record failed its checksum")
                yield  # an async generator, as a streaming call is

            return fail()

        stub.Read = failing_read
        with caplog.at_level(logging.WARNING, logger="sessiond_store"):
            await a.append(key(project, s), [third])
        assert "cannot read the summary to fold onto" in caplog.text
        stub.Read = real_read
        assert await a.load(key(project, s)) == [first, second, third]
        await a.append(key(project, s), [fourth])  # folds the whole transcript, then the batch
        assert await summary_of(a, project, s) == {"count": 4, "batches": 2}

    run(go())
