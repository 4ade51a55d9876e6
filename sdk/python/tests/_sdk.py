"""Loads the official Python Agent SDK vendored beside the repository
(../shared/vendor, unmodified: see its SOURCES.md) for the tests that use
it as the oracle of the SessionStore contract.

The SDK's package imports names from mcp at import time; Debian 12 has no
python3-mcp, so a stand-in of those names is installed first when mcp is
missing. The store code paths never use MCP: a stand-in refuses to be
built or called, so a test reaching MCP fails instead of passing on a fake.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent.parent
DEFAULT_SRC = REPO.parent / "shared" / "vendor" / "claude-agent-sdk-python" / "src"


class _Unavailable:
    """What every class name of the stand-in is: subclassable (the SDK
    subclasses ToolAnnotations), never instantiable."""

    def __init_subclass__(cls, **kwargs):
        pass

    def __init__(self, *args, **kwargs):
        raise RuntimeError("mcp is a stand-in in these tests (Debian 12 has no python3-mcp)")


def _unavailable(*args, **kwargs):
    raise RuntimeError("mcp is a stand-in in these tests (Debian 12 has no python3-mcp)")


_FUNCTIONS = {"create_client_server_memory_streams"}


def _standin_module(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__path__ = []  # a package, so that submodules import

    def getattr_(attr: str):
        if attr in _FUNCTIONS:
            return _unavailable
        if attr[:1].isupper():
            cls = type(attr, (_Unavailable,), {"__module__": name})
            setattr(mod, attr, cls)
            return cls
        raise AttributeError("%s has no %s (mcp stand-in)" % (name, attr))

    mod.__getattr__ = getattr_
    return mod


def _install_mcp_standin() -> None:
    try:
        importlib.import_module("mcp.types")
        return
    except ImportError:
        pass
    for name in ("mcp", "mcp.types", "mcp.server", "mcp.shared", "mcp.shared.message", "mcp.shared.memory"):
        mod = _standin_module(name)
        sys.modules[name] = mod
        parent, _, leaf = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], leaf, mod)


def load_sdk():
    """The vendored claude_agent_sdk package ($SESSIOND_SDK_PY_SRC, else
    ../shared/vendor/claude-agent-sdk-python/src). Skips the test when it is
    missing, unless SESSIOND_REQUIRE_SDK=1 (make test sets it)."""
    src = Path(os.environ.get("SESSIOND_SDK_PY_SRC") or DEFAULT_SRC)
    if not (src / "claude_agent_sdk" / "__init__.py").is_file():
        msg = "the vendored Python Agent SDK is not at %s (set SESSIOND_SDK_PY_SRC)" % src
        if os.environ.get("SESSIOND_REQUIRE_SDK") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))
    _install_mcp_standin()
    return importlib.import_module("claude_agent_sdk")
