"""The store rides over a daemon restart: UNAVAILABLE is retried with the
same batch id, on a new, newly checked connection."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time

import pytest

from conftest import entry, key, run, short_tmp, sid, start_daemon
from sessiond_store import SessiondError, SessiondStore, SessiondUnavailableError


@pytest.fixture
def base():
    path = short_tmp("sdpy-rs-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_daemon_restarted_between_calls(sessiond_bin, base):
    d = start_daemon(sessiond_bin, base)
    store = SessiondStore(socket_path=d.socket, fold=None, backoff=(0.2, 1.0))
    k = key("-tmp-sdpy-restart", sid())
    first, second = entry("before"), entry("after")

    async def go():
        nonlocal d
        await store.append(k, [first])
        assert d.stop() == 0
        d = start_daemon(sessiond_bin, base)
        await store.append(k, [second])
        assert await store.load(k) == [first, second]
        await store.close()

    try:
        run(go())
    finally:
        d.stop()


def test_daemon_coming_up_during_the_retries(sessiond_bin, base):
    d = start_daemon(sessiond_bin, base)
    sock = d.socket
    assert d.stop() == 0
    if os.path.exists(sock):
        os.unlink(sock)
    holder = {}

    def later():
        time.sleep(0.6)
        holder["d"] = start_daemon(sessiond_bin, base)

    t = threading.Thread(target=later)
    store = SessiondStore(socket_path=sock, fold=None, backoff=(1.0, 2.0))
    k = key("-tmp-sdpy-restart", sid())
    e = entry("waited")

    async def go():
        t.start()
        await store.append(k, [e])
        assert await store.load(k) == [e]
        await store.close()

    try:
        run(go())
    finally:
        t.join()
        if "d" in holder:
            assert holder["d"].stop() == 0


def test_gives_up_after_the_window(base):
    os.chmod(base, 0o700)
    store = SessiondStore(socket_path=os.path.join(base, "s.sock"), fold=None, backoff=(0.3,), retry_window=0.5)
    started = time.monotonic()
    with pytest.raises(SessiondUnavailableError):
        run(store.append(key("-tmp-sdpy-restart", sid()), [entry()]))
    # One retry fits in the window, a second does not.
    assert 0.3 <= time.monotonic() - started < 2


def test_channel_dropped_during_the_trust_check(new_store, project, monkeypatch):
    """A call that checks the socket again (its channel not connected) while
    another call drops that channel gets a new connection, not a stub that
    is gone (which failed as AttributeError, never retried)."""
    import threading

    import grpc

    from sessiond_store import _trust
    import sessiond_store.store as store_mod

    async def go():
        store = new_store()
        await store.list_sessions(project)  # connected
        conn = store._conn()
        generation = conn.generation
        conn.channel.get_state = lambda try_to_connect=False: grpc.ChannelConnectivity.IDLE
        entered, release = threading.Event(), threading.Event()
        real_verify = _trust.verify

        def slow_verify(path):
            entered.set()
            release.wait(10)
            return real_verify(path)

        monkeypatch.setattr(store_mod._trust, "verify", slow_verify)
        listing = asyncio.ensure_future(store.list_sessions(project))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        store._drop_channel(generation)  # as an UNAVAILABLE answer to another call does
        release.set()
        assert await listing == []
        assert store._conn().generation == generation + 1

    run(go())


def test_messages_say_what_to_do(sessiond_bin, base):
    """Failures gRPC reports itself come with what happened and what to do,
    not gRPC's own text: a daemon that does not answer in time, and none
    at all."""
    import signal

    import grpc

    d = start_daemon(sessiond_bin, base)
    try:
        store = SessiondStore(socket_path=d.socket, fold=None, timeout=0.3, load_timeout=0.3, tries=1)
        stop(d.proc.pid)
        try:
            with pytest.raises(SessiondError) as info:
                run(store.load(key("-tmp-sdpy-msg", sid())))
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
        assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "did not answer in time" in str(info.value) and "sessionctl status" in str(info.value), str(info.value)
        assert "Deadline Exceeded" not in str(info.value)
    finally:
        assert d.stop() == 0
    with pytest.raises(SessiondUnavailableError) as info:
        run(SessiondStore(socket_path=d.socket, fold=None, tries=1).load(key("-tmp-sdpy-msg", sid())))
    assert "start sessiond" in str(info.value), str(info.value)


def test_dropped_channel_lets_a_long_load_finish(new_store, project, daemon):
    """Dropping the channel (another call got UNAVAILABLE) lets a load
    already waiting on it finish, even past the unary timeout: it was
    cancelled once that timeout passed, and CANCELLED is not retried."""
    import signal

    from sessiond_store.gen import sessiond_pb2 as pb

    async def go():
        s = sid()
        e = entry()
        await new_store(fold=None).append(key(project, s), [e])
        store = new_store(fold=None, timeout=0.05, load_timeout=30)
        await store.list_sessions(project)  # connected
        old_stub = store._conn().stub
        stop(daemon.proc.pid)  # a daemon slow to answer
        try:
            load = asyncio.ensure_future(store.load(key(project, s)))
            await asyncio.sleep(0.05)  # the read sent, waiting for its answer
            store._drop_channel(store._conn().generation)
            await asyncio.sleep(0.3)  # far past the unary timeout
        finally:
            os.kill(daemon.proc.pid, signal.SIGCONT)
        assert await load == [e]
        # The dropped channel still carries calls (it was closed, and its
        # calls cancelled, once the unary timeout had passed).
        await old_stub.Status(pb.StatusRequest(), timeout=5)
        # close() closes it too, without waiting out the deadline.
        await asyncio.wait_for(store.close(), 5)
        assert not store._conn().closing

    run(go())


def stop(pid):
    """SIGSTOP pid and wait until the kernel says it is stopped: the signal
    is delivered asynchronously, and a daemon still running for a moment
    would answer the call a test means to leave waiting."""
    import signal

    def state(path):
        with open(path) as f:
            stat = f.read()
        return stat[stat.rindex(")") + 2]

    os.kill(pid, signal.SIGSTOP)
    for _ in range(500):
        # Every thread: the Go runtime's threads stop one by one.
        tasks = os.listdir("/proc/%d/task" % pid)
        if all(state("/proc/%d/task/%s/stat" % (pid, t)) == "T" for t in tasks):
            return
        time.sleep(0.01)
    raise AssertionError("sessiond (pid %d) did not stop" % pid)


def test_sessiond_own_unavailable_keeps_its_message():
    """An UNAVAILABLE sessiond answers itself (a session being moved, a
    writer that keeps failing) carries its ErrorInfo and keeps its message;
    only gRPC's own statuses (no ErrorInfo) get the adapter's words."""
    import grpc

    def field(n, b):
        return bytes([n << 3 | 2, len(b)]) + b

    info = field(1, b"SESSIOND") + field(2, b"sessiond")
    any_ = field(1, b"type.googleapis.com/google.rpc.ErrorInfo") + field(2, info)
    details = bytes([1 << 3, 14]) + field(2, b"busy") + field(3, any_)
    store = SessiondStore(socket_path="/nonexistent-sdpy/s.sock", fold=None)

    def error(trailers):
        return grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(*trailers),
                                    "session -p/x is being moved; retry in a moment")

    own = store._error("append to -p/x", error([("grpc-status-details-bin", details)]))
    assert "is being moved; retry in a moment" in str(own) and own.reason == "SESSIOND", str(own)
    transport = store._error("append to -p/x", error([]))
    assert "no answer from sessiond" in str(transport) and "being moved" not in str(transport), str(transport)
