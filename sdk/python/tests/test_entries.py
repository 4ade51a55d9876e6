"""Entries survive the trip byte for byte; batches are stored once."""

from __future__ import annotations

import json
import os

import grpc
import grpc.aio
import pytest

from conftest import entry, key, run, sid
from sessiond_store import SessiondError
from sessiond_store._encode import decode_entry, encode_entry
from sessiond_store.gen import sessiond_pb2 as pb
from sessiond_store.gen import sessiond_pb2_grpc as pb_grpc


def raw_stub(daemon):
    channel = grpc.aio.insecure_channel("unix:" + daemon.socket)
    return channel, pb_grpc.SessiondStub(channel)


def canonical_lines(daemon, project, session_id):
    path = os.path.join(daemon.root, "projects", project, session_id + ".jsonl")
    with open(path, "rb") as f:
        return f.read().split(b"\n")


async def flush(daemon, project, session_id):
    channel, stub = raw_stub(daemon)
    async with channel:
        # Flush answers in pages (a stream); the flush is done once it ends.
        async for _ in stub.Flush(pb.FlushRequest(session=pb.SessionRef(project_key=project, session_id=session_id))):
            pass


def nested(depth):
    value = {"leaf": True}
    for i in range(depth):
        value = [value] if i % 2 else {"d": value}
    return value


# ---- encoding, no daemon ----------------------------------------------------


def test_encode_compact_keeps_order_and_characters():
    e = {"type": "user", "z": 1, "a": ["é", "\u2028\u2029", "日本", "😀"], "m": {"b": None, "a": 1.5}}
    b = encode_entry(e)
    assert b == '{"type":"user","z":1,"a":["é","\u2028\u2029","日本","😀"],"m":{"b":null,"a":1.5}}'.encode()
    assert decode_entry(b) == e


def test_encode_lone_surrogates_as_escapes():
    e = {"s": "a\ud83db", "\udfff": ["\udc00", "\\\ud800", '"\ud800"'], "pair": "\ud83d\ude00"}
    b = encode_entry(e)
    b.decode("utf-8")  # valid UTF-8
    assert b"\\ud83d" in b and b"\\udfff" in b and b"\\udc00" in b
    back = json.loads(b)
    assert back["s"] == "a\ud83db"
    assert back["\udfff"] == ["\udc00", "\\\ud800", '"\ud800"']
    # Two surrogates that form a pair are one character in JSON.
    assert back["pair"] == "😀"


def test_encode_refuses_what_json_cannot_hold():
    with pytest.raises(ValueError):
        encode_entry({"x": float("nan")})
    with pytest.raises(TypeError):
        encode_entry({"x": object()})


def test_decode_skips_non_objects():
    assert decode_entry(b"[1]") is None
    assert decode_entry(b'{"a":') is None
    assert decode_entry(b"\xff{}") is None


def test_decode_keeps_a_line_with_bytes_that_are_not_utf8():
    # Another writer's line sessiond serves as valid: kept, the bad byte as
    # U+FFFD, as the SDK's own readers decode transcripts.
    assert decode_entry(b'{"type":"user","t":"a\xffb"}') == {"type": "user", "t": "a\ufffdb"}


# ---- against the daemon -----------------------------------------------------


TRICKY = [
    {"type": "user", "uuid": "u-surrogate", "message": {"content": "broken emoji \ud83d here"}, "k\udc00": 1},
    {"type": "assistant", "uuid": "u-seps", "text": "line\u2028sep\u2029para", "html": "<a>&amp;</a>"},
    {"type": "progress", "uuid": "u-deep", "data": nested(200)},
    {"type": "brand-new-type", "payload": {"whatever": [1, 2.5, -0.5, 10**30, None, False, ""]}},
    {"type": "user", "nul": "a\u0000b", "ctl": "\t\n\r\u001f", "quote": '"\\'},
]


def test_tricky_entries_round_trip(new_store, project, daemon):
    async def go():
        store = new_store()
        s = sid()
        await store.append(key(project, s), TRICKY)
        assert await store.load(key(project, s)) == TRICKY
        await flush(daemon, project, s)
        # Bytes kept: the canonical file holds exactly what was sent.
        lines = canonical_lines(daemon, project, s)
        assert lines[:-1] == [encode_entry(e) for e in TRICKY] and lines[-1] == b""

    run(go())


def test_five_megabyte_entry(new_store, project):
    async def go():
        store = new_store()
        s = sid()
        big = entry("x")
        big["toolUseResult"] = {"stdout": ("0123456789abcdé\u2028" * 330000)[: 5 * 1024 * 1024]}
        small = entry("after")
        await store.append(key(project, s), [big])
        await store.append(key(project, s), [small])
        loaded = await store.load(key(project, s))
        assert loaded == [big, small]

    run(go())


def test_same_batch_id_stored_once(daemon, project):
    async def go():
        channel, stub = raw_stub(daemon)
        async with channel:
            s = sid()
            ref = pb.SessionRef(project_key=project, session_id=s)
            data = [encode_entry({"type": "note", "n": i}) for i in range(3)]  # no uuids
            req = pb.AppendRequest(session=ref, entries=data, batch_id="batch-1")
            first = await stub.Append(req)
            second = await stub.Append(req)
            assert not first.duplicate_batch
            assert second.duplicate_batch
            assert [r.outcome for r in second.results] == [pb.ENTRY_OUTCOME_DUPLICATE] * 3
            lines = []
            async for resp in stub.Read(pb.ReadRequest(session=ref)):
                lines += [e.data for e in resp.entries]
            assert lines == data

    run(go())


def test_identical_batches_with_new_ids_both_stored(new_store, project):
    async def go():
        store = new_store()
        s = sid()
        batch = [{"type": "note", "text": "same"}, {"type": "note", "text": "again"}]
        await store.append(key(project, s), batch)
        await store.append(key(project, s), batch)
        assert await store.load(key(project, s)) == batch + batch

    run(go())


def test_uuid_duplicates_not_stored_twice(new_store, project):
    async def go():
        store = new_store()
        s = sid()
        e = entry()
        await store.append(key(project, s), [e])
        await store.append(key(project, s), [e, entry("new")])
        loaded = await store.load(key(project, s))
        assert [x["uuid"] for x in loaded] == [e["uuid"], loaded[1]["uuid"]] and len(loaded) == 2

    run(go())


def test_retry_after_lost_answer_reuses_batch_id(new_store, project):
    """The daemon stores the batch, the answer is lost (UNAVAILABLE): the
    store sends it again with the same batch id and the daemon stores
    nothing more, though the entries have no uuid."""

    async def go():
        store = new_store(backoff=(0.05,))
        sent = []
        original = store._unary

        def lossy(name, request):
            invoke = original(name, request)

            async def call(stub):
                if name == "Append":
                    sent.append(request.batch_id)
                result = await invoke(stub)
                if name == "Append" and len(sent) == 1:
                    raise grpc.aio.AioRpcError(
                        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "connection lost"
                    )
                return result

            return call

        store._unary = lossy
        s = sid()
        batch = [{"type": "note", "n": 1}, {"type": "note", "n": 2}]
        await store.append(key(project, s), batch)
        assert len(sent) == 2 and sent[0] == sent[1] and sent[0]
        assert await store.load(key(project, s)) == batch
        await store.append(key(project, s), batch)
        assert len(sent) == 3 and sent[2] != sent[0]

    run(go())


def test_malformed_lines_skipped(new_store, project, daemon):
    async def go():
        store = new_store()
        s = sid()
        first, second = entry("one"), entry("two")
        # A transcript another program wrote, with a torn line and a line
        # that is JSON but not an object.
        folder = os.path.join(daemon.root, "projects", project)
        os.makedirs(folder, mode=0o700)
        path = os.path.join(folder, s + ".jsonl")
        with open(path, "wb") as f:
            f.write(encode_entry(first) + b'\n{"type":"user","uuid":"torn","mess\n[1,2]\n')
        os.chmod(path, 0o600)
        await store.append(key(project, s), [second])
        assert await store.load(key(project, s)) == [first, second]
        # The daemon itself marks them.
        channel, stub = raw_stub(daemon)
        async with channel:
            flags = []
            async for resp in stub.Read(pb.ReadRequest(session=pb.SessionRef(project_key=project, session_id=s))):
                flags += [e.malformed for e in resp.entries]
        assert flags == [False, True, True, False]

    run(go())


def test_agent_config_dir_defaults(new_store, project, daemon, monkeypatch):
    seen = []

    async def go():
        store = new_store()
        original = store._unary

        def spy(name, request):
            if name == "Append":
                seen.append(request.agent_config_dir)
            return original(name, request)

        store._unary = spy
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", "/somewhere/claude")
        await store.append(key(project, sid()), [entry()])
        monkeypatch.delenv("CLAUDE_CONFIG_DIR")
        monkeypatch.setenv("HOME", "/home/someone")
        await store.append(key(project, sid()), [entry()])
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", "rel/claude")
        await store.append(key(project, sid()), [entry()])

    run(go())
    assert seen == ["/somewhere/claude", "/home/someone/.claude", os.path.join(os.getcwd(), "rel", "claude")]


def test_bad_keys_refused(new_store):
    async def go():
        store = new_store()
        with pytest.raises(ValueError):
            await store.load({"project_key": "", "session_id": sid()})
        with pytest.raises(ValueError):
            await store.load({"project_key": "-p", "session_id": sid(), "subpath": ""})
        with pytest.raises(ValueError):
            await store.append({"session_id": sid()}, [entry()])

    run(go())


def test_big_append_split_into_batches(new_store, project):
    async def go():
        store = new_store(max_batch_bytes=1000)
        s = sid()
        batch = [{"type": "note", "pad": "x" * 300, "n": i} for i in range(10)]
        await store.append(key(project, s), batch)
        assert await store.load(key(project, s)) == batch

    run(go())


def test_one_store_across_event_loops(daemon, project):
    """Made outside any loop (as agent options are) and used from two
    asyncio.run calls in turn."""
    from sessiond_store import SessiondStore

    store = SessiondStore(socket_path=daemon.socket, fold=None)
    s = sid()
    first, second = entry("1"), entry("2")
    run(store.append(key(project, s), [first]))
    run(store.append(key(project, s), [second]))
    assert run(store.load(key(project, s))) == [first, second]
