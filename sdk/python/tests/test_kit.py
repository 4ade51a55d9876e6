"""The official Python Agent SDK's SessionStore conformance kit,
claude_agent_sdk.testing.run_session_store_conformance, run unmodified
against SessiondStore.

The kit names its sessions "sess", "a", "main"... and its projects "proj",
"A", "B" in every contract, and calls make_store once per contract for
isolation: each store here talks to a daemon of its own on an empty root.
"""

from __future__ import annotations

import shutil

from conftest import run, short_tmp, start_daemon
from _sdk import load_sdk


def test_official_python_kit_passes(sessiond_bin):
    sdk = load_sdk()
    from claude_agent_sdk.testing import run_session_store_conformance
    from sessiond_store import SessiondStore

    daemons = []
    stores = []

    def make_store():
        base = short_tmp("sdpy-kit-")
        d = start_daemon(sessiond_bin, base)
        daemons.append(d)
        # The SDK's own fold, as a user of both gets by default.
        store = SessiondStore(socket_path=d.socket, fold=sdk.fold_session_summary)
        stores.append(store)
        return store

    async def go():
        try:
            await run_session_store_conformance(make_store)
        finally:
            for s in stores:
                await s.close()

    try:
        run(go())
    finally:
        codes = [d.stop() for d in daemons]
        for d in daemons:
            shutil.rmtree(d.base, ignore_errors=True)
    # One daemon per contract and one for the kit's probe of optional methods.
    assert len(daemons) == 15
    assert codes == [0] * len(daemons)
