"""default_socket picks what sessiond's layout.DefaultSocket picks."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import REPO, short_tmp
from sessiond_store import default_socket
from sessiond_store._layout import private_folder


def pick(env, *, platform="linux", private=False, uid=1000, home="/home/u"):
    return default_socket(
        env, uid=uid, platform=platform, private=lambda d, u: private, home=lambda: home
    )


def test_order():
    assert pick({"SESSIOND_SOCKET": "rel/s.sock", "XDG_RUNTIME_DIR": "/run/user/1000"}) == "rel/s.sock"
    assert pick({"XDG_RUNTIME_DIR": "/run/user/1000/"}, private=True) == "/run/user/1000/sessiond/sessiond.sock"
    assert pick({"XDG_RUNTIME_DIR": "relative"}, private=True) == "/run/user/1000/sessiond/sessiond.sock"
    assert pick({"HOME": "/h"}, private=True) == "/run/user/1000/sessiond/sessiond.sock"
    assert pick({"HOME": "/h"}, private=False) == "/h/.local/state/sessiond/run/sessiond.sock"
    # /run/user is a Linux thing, TMPDIR a macOS one.
    assert pick({"HOME": "/h", "TMPDIR": "/var/folders/x/T/"}, private=False) == "/h/.local/state/sessiond/run/sessiond.sock"
    assert pick({"HOME": "/h", "TMPDIR": "/var/folders/x/T/"}, platform="darwin", private=True) == (
        "/var/folders/x/T/sessiond/sessiond.sock"
    )
    assert pick({"HOME": "/h", "TMPDIR": "/" + "t" * 90}, platform="darwin") == "/h/.local/state/sessiond/run/sessiond.sock"


def test_state_folder():
    assert pick({"SESSIOND_STATE_DIR": "/st//x/", "XDG_STATE_HOME": "/xdg", "HOME": "/h"}) == "/st/x/run/sessiond.sock"
    assert pick({"XDG_STATE_HOME": "/xdg", "HOME": "/h"}) == "/xdg/sessiond/run/sessiond.sock"
    assert pick({"XDG_STATE_HOME": "xdg", "HOME": "/h"}) == "/h/.local/state/sessiond/run/sessiond.sock"
    # A relative SESSIOND_STATE_DIR or HOME is an error on the Go side: no
    # state folder, so the last choice.
    assert pick({"SESSIOND_STATE_DIR": "st", "HOME": "/h"}) == "/tmp/sessiond-1000/sessiond.sock"
    assert pick({"HOME": "h"}) == "/tmp/sessiond-1000/sessiond.sock"
    assert pick({}, home="/from/passwd") == "/from/passwd/.local/state/sessiond/run/sessiond.sock"


def test_length_limit():
    tail = "/run/sessiond.sock"
    fits = "/" + "a" * (107 - len(tail) - 1)
    assert pick({"SESSIOND_STATE_DIR": fits}) == fits + tail
    assert len((fits + tail).encode()) == 107
    assert pick({"SESSIOND_STATE_DIR": fits + "b"}) == "/tmp/sessiond-1000/sessiond.sock"
    assert pick({"SESSIOND_STATE_DIR": fits}, platform="darwin") == "/tmp/sessiond-1000/sessiond.sock"
    # Bytes, not characters.
    two_byte = "/" + "é" * 44 + "a"
    assert len(two_byte) + len(tail) < 107 < len((two_byte + tail).encode())
    assert pick({"SESSIOND_STATE_DIR": two_byte}) == "/tmp/sessiond-1000/sessiond.sock"


def test_private_folder():
    base = short_tmp("sdpy-priv-")
    try:
        os.chmod(base, 0o700)
        assert private_folder(base, os.getuid())
        assert not private_folder(base, os.getuid() + 1)
        os.chmod(base, 0o750)
        assert not private_folder(base, os.getuid())
        os.chmod(base, 0o700)
        link = base + "-link"
        os.symlink(base, link)
        try:
            assert not private_folder(link, os.getuid())
        finally:
            os.unlink(link)
    finally:
        shutil.rmtree(base)


@pytest.fixture(scope="module")
def golayout():
    if shutil.which("go") is None:
        pytest.skip("go is not installed")
    out = short_tmp("sdpy-gol-")
    path = os.path.join(out, "golayout")
    subprocess.run(["go", "build", "-o", path, "./sdk/python/tests/testdata/golayout"], cwd=str(REPO), check=True)
    yield path
    shutil.rmtree(out, ignore_errors=True)


@pytest.mark.parametrize(
    "env",
    [
        {"SESSIOND_SOCKET": "/x/y.sock"},
        {"XDG_RUNTIME_DIR": "/run/user/77//"},
        {"XDG_RUNTIME_DIR": "rel", "HOME": "/h"},
        {"SESSIOND_STATE_DIR": "/st/"},
        {"SESSIOND_STATE_DIR": "rel", "HOME": "/h"},
        {"XDG_STATE_HOME": "/xs", "HOME": "/h"},
        {"XDG_STATE_HOME": "xs", "HOME": "/h"},
        {"HOME": "/h"},
        {"HOME": "rel"},
        {},
        {"SESSIOND_STATE_DIR": "/" + "s" * 88},
        {"SESSIOND_STATE_DIR": "/" + "s" * 89},
    ],
)
def test_same_as_go(golayout, env):
    base = {k: v for k, v in os.environ.items() if k == "PATH"}
    base.update(env)
    go = subprocess.run([golayout], env=base, check=True, capture_output=True, text=True).stdout
    assert default_socket(base) == go
