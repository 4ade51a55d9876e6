"""The store rides over a daemon restart: UNAVAILABLE is retried with the
same batch id, on a new, newly checked connection."""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from conftest import entry, key, run, short_tmp, sid, start_daemon
from sessiond_store import SessiondStore, SessiondUnavailableError


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
