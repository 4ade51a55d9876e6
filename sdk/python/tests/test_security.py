"""The store sends nothing to a socket another user controls, and still
works with the user's own daemon."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

import sessiond_store._trust as trust
from conftest import daemon_env, entry, key, run, short_tmp, sid, start_daemon
from sessiond_store import SessiondStore, SessiondUnavailableError, UntrustedSocketError, default_socket
from sessiond_store._layout import private_folder

NOBODY = 65534

# A raw listener that counts the connections it accepts and the bytes they
# carry, and prints the counts as JSON on SIGTERM. With "drop" it binds as
# the user that starts it, then becomes uid/gid 65534 before listen(): the
# kernel records the listener's credentials at listen(), so the socket is
# served by 65534 though it sits in a folder of ours.
LISTENER = r"""
import json, os, signal, socket, sys
path, mode = sys.argv[1], sys.argv[2]
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
if mode == "drop":
    os.chmod(path, 0o666)
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
srv.listen(16)
stats = {"conns": 0, "bytes": 0, "uid": os.getuid(), "pid": os.getpid()}
def report(*_):
    sys.stdout.write(json.dumps(stats) + "\n")
    sys.stdout.flush()
    os._exit(0)
signal.signal(signal.SIGTERM, report)
sys.stdout.write("ready\n")
sys.stdout.flush()
while True:
    c, _ = srv.accept()
    stats["conns"] += 1
    while True:
        b = c.recv(65536)
        if not b:
            break
        stats["bytes"] += len(b)
    c.close()
"""


class Listener:
    def __init__(self, path, mode="plain", **popen):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LISTENER, path, mode],
            stdout=subprocess.PIPE,
            cwd="/",
            **popen,
        )
        line = self.proc.stdout.readline()
        assert line == b"ready\n", "the listener did not start: %r" % line

    def stats(self):
        time.sleep(0.2)  # let it count what may still be in flight
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        return json.loads(out.decode().strip().splitlines()[-1])


@pytest.fixture
def base():
    path = short_tmp("sdpy-sec-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def verify_calls(monkeypatch):
    calls = []
    original = trust.verify

    def counting(path, *a, **kw):
        calls.append(path)
        return original(path, *a, **kw)

    monkeypatch.setattr(trust, "verify", counting)
    return calls


def needs_root():
    if os.geteuid() != 0:
        pytest.skip("needs root (to run a listener as uid %d)" % NOBODY)


def attempt(store, project="-tmp-sdpy-sec"):
    async def go():
        try:
            await store.append(key(project, sid()), [entry("secret")])
        finally:
            await store.close()

    run(go())


def test_symlinked_folder_refused(base, verify_calls):
    real = os.path.join(base, "real")
    os.mkdir(real, 0o700)
    link = os.path.join(base, "link")
    os.symlink(real, link)
    listener = Listener(os.path.join(real, "s.sock"))
    store = SessiondStore(socket_path=os.path.join(link, "s.sock"), fold=None, backoff=(0.01,))
    with pytest.raises(UntrustedSocketError) as err:
        attempt(store)
    msg = str(err.value)
    assert os.path.join(link, "s.sock") in msg and "symlink" in msg and real in msg
    assert "SESSIOND_SOCKET" in msg and "remove" in msg
    assert err.value.folder_link == real
    assert verify_calls == [os.path.join(link, "s.sock")], "refusal was retried"
    assert listener.stats()["conns"] == 0


def test_folder_writable_by_others_refused(base):
    folder = os.path.join(base, "open")
    os.mkdir(folder)
    os.chmod(folder, 0o777)
    listener = Listener(os.path.join(folder, "s.sock"))
    with pytest.raises(UntrustedSocketError) as err:
        attempt(SessiondStore(socket_path=os.path.join(folder, "s.sock"), fold=None))
    assert "written by others" in str(err.value)
    assert listener.stats()["conns"] == 0


def test_folder_and_listener_of_another_user_refused(verify_calls):
    """The /tmp/sessiond-<uid> attack: another user made the folder first and
    serves a socket in it."""
    needs_root()
    folder = short_tmp("sdpy-nobody-")
    try:
        os.chown(folder, NOBODY, NOBODY)
        os.chmod(folder, 0o700)
        path = os.path.join(folder, "sessiond.sock")
        listener = Listener(path, user=NOBODY, group=NOBODY, extra_groups=[])
        with pytest.raises(UntrustedSocketError) as err:
            attempt(SessiondStore(socket_path=path, fold=None))
        msg = str(err.value)
        assert path in msg and "uid %d" % NOBODY in msg and folder in msg
        assert verify_calls == [path]
        # The folder check refused it without connecting; the peer check on
        # its own refuses it too, having connected but sent nothing.
        with pytest.raises(UntrustedSocketError) as peer_err:
            trust.check_peer(path)
        assert peer_err.value.server_uid == NOBODY
        assert "uid %d (pid " % NOBODY in str(peer_err.value)
        stats = listener.stats()
        assert stats["uid"] == NOBODY and stats["conns"] == 1 and stats["bytes"] == 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_socket_served_by_another_user_refused_by_peer_credentials(base, verify_calls):
    """The folder passes (it is ours), but the process serving the socket
    runs as another user: only SO_PEERCRED can tell."""
    needs_root()
    os.chmod(base, 0o700)
    path = os.path.join(base, "s.sock")
    listener = Listener(path, mode="drop")
    with pytest.raises(UntrustedSocketError) as err:
        attempt(SessiondStore(socket_path=path, fold=None))
    stats = listener.stats()
    msg = str(err.value)
    assert err.value.server_uid == NOBODY and err.value.server_pid == stats["pid"]
    assert path in msg and "uid %d (pid %d)" % (NOBODY, stats["pid"]) in msg
    assert "nothing was sent" in msg.lower() and "SESSIOND_SOCKET" in msg
    assert verify_calls == [path]
    # Our probe connected (that is how the kernel names the peer) and sent nothing.
    assert stats["uid"] == NOBODY and stats["conns"] == 1 and stats["bytes"] == 0


def test_no_daemon_is_unavailable_and_retried(base, verify_calls):
    path = os.path.join(base, "s.sock")
    store = SessiondStore(socket_path=path, fold=None, backoff=(0.01,))
    with pytest.raises(SessiondUnavailableError) as err:
        attempt(store)
    assert path in str(err.value)
    assert len(verify_calls) == 3
    # A stale socket file: nothing listens.
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()
    with pytest.raises(SessiondUnavailableError) as err:
        attempt(store)
    assert "nothing listens" in str(err.value)


def test_own_daemon_at_the_default_socket(sessiond_bin, monkeypatch):
    """With no SESSIOND_SOCKET and no XDG_RUNTIME_DIR, the daemon and the
    store both pick <state>/run/sessiond.sock, and the store trusts it."""
    if sys.platform.startswith("linux") and private_folder("/run/user/%d" % os.getuid(), os.getuid()):
        pytest.skip("/run/user/%d is private here: the default is there, not in the state folder" % os.getuid())
    base = short_tmp("sdpy-def-")
    try:
        state = os.path.join(base, "st")
        for name in ("SESSIOND_SOCKET", "XDG_RUNTIME_DIR", "XDG_STATE_HOME", "SESSIOND_ROOT"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("SESSIOND_STATE_DIR", state)
        expected = os.path.join(state, "run", "sessiond.sock")
        assert default_socket() == expected
        env = daemon_env({"SESSIOND_STATE_DIR": state}, drop=("XDG_RUNTIME_DIR", "XDG_STATE_HOME"))
        d = start_daemon(sessiond_bin, base, socket_flag=False, state_flag=False, env=env, socket_path=expected)
        try:

            async def go():
                store = SessiondStore(fold=None)
                assert store.socket_path == expected
                k = key("-tmp-sdpy-default", sid())
                e = entry("mine")
                await store.append(k, [e])
                assert await store.load(k) == [e]
                await store.close()

            run(go())
        finally:
            assert d.stop() == 0
    finally:
        shutil.rmtree(base, ignore_errors=True)

