"""Fixtures: a real sessiond, built from this repository (or $SESSIOND_BIN),
and helpers to drive the async store from plain test functions."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

HERE = Path(__file__).resolve().parent
SDK = HERE.parent
REPO = SDK.parent.parent
sys.path.insert(0, str(SDK))

from sessiond_store import SessiondStore  # noqa: E402


def run(coro):
    """Run a coroutine to completion on a fresh event loop."""
    return asyncio.run(coro)


def short_tmp(prefix: str) -> str:
    # Socket paths must stay under 108 bytes: keep test folders short.
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


@pytest.fixture(scope="session")
def sessiond_bin() -> Iterator[str]:
    given = os.environ.get("SESSIOND_BIN")
    if given:
        yield given
        return
    out = short_tmp("sdpy-bin-")
    path = os.path.join(out, "sessiond")
    subprocess.run(["go", "build", "-o", path, "./cmd/sessiond"], cwd=str(REPO), check=True)
    yield path
    shutil.rmtree(out, ignore_errors=True)


def wait_for_socket(path: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("sessiond exited with %s before serving %s" % (proc.returncode, path))
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return
        except OSError:
            time.sleep(0.05)
        finally:
            s.close()
    raise RuntimeError("sessiond did not serve %s within %ss" % (path, timeout))


def daemon_env(extra: Optional[Dict[str, str]] = None, drop=()) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIOND_")}
    env.pop("CLAUDE_CONFIG_DIR", None)
    for k in drop:
        env.pop(k, None)
    env.update(extra or {})
    return env


@dataclass
class Daemon:
    proc: subprocess.Popen
    socket: str
    root: str
    state: str
    base: str

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_daemon(binary: str, base: str, *, socket_flag: bool = True, env: Optional[Dict[str, str]] = None,
                 socket_path: Optional[str] = None, state_flag: bool = True) -> Daemon:
    root = os.path.join(base, "claude")
    state = os.path.join(base, "state")
    sock = socket_path or os.path.join(base, "run", "s.sock")
    args = [binary, "--root", root, "--log-format", "json", "--log-level", "warn"]
    if state_flag:
        args += ["--state-dir", state]
    if socket_flag:
        args += ["--socket", sock]
    log = open(os.path.join(base, "sessiond.log"), "ab")
    proc = subprocess.Popen(args, env=env if env is not None else daemon_env(), stdout=log, stderr=log)
    log.close()
    d = Daemon(proc=proc, socket=sock, root=root, state=state, base=base)
    try:
        wait_for_socket(sock, proc)
    except Exception:
        d.stop()
        with open(os.path.join(base, "sessiond.log"), "rb") as f:
            sys.stderr.write(f.read().decode("utf-8", "replace"))
        raise
    return d


@pytest.fixture(scope="session")
def daemon(sessiond_bin: str) -> Iterator[Daemon]:
    base = short_tmp("sdpy-")
    d = start_daemon(sessiond_bin, base)
    yield d
    code = d.stop()
    assert code == 0, "sessiond exited with %s on SIGTERM (log in %s)" % (code, base)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def project() -> str:
    """A project key of its own for each test."""
    return "-tmp-sdpy-" + uuid.uuid4().hex[:12]


def sid() -> str:
    return str(uuid.uuid4())


def key(project_key: str, session_id: str, subpath: Optional[str] = None) -> dict:
    k = {"project_key": project_key, "session_id": session_id}
    if subpath is not None:
        k["subpath"] = subpath
    return k


def entry(text: str = "hi", **extra) -> dict:
    e = {
        "type": "user",
        "uuid": str(uuid.uuid4()),
        "parentUuid": None,
        "timestamp": "2025-01-01T00:00:00.000Z",
        "message": {"role": "user", "content": text},
    }
    e.update(extra)
    return e


@pytest.fixture
def new_store(daemon: Daemon):
    """A factory of stores on the test daemon (made inside the test's loop)."""

    def make(**kw) -> SessiondStore:
        kw.setdefault("fold", None)
        return SessiondStore(socket_path=daemon.socket, **kw)

    return make
