"""The three lines on defaults: an agent whose config dir is sessiond's root
(both ~/.claude). The CLI writes its own copy of every line into the
transcript sessiond owns, then the SDK mirrors the same lines through the
store: each line is held once, and the summary stays whole without folding
the transcript again each turn."""

from __future__ import annotations

import json
import os
import uuid

from conftest import key, run, sid
from test_summaries import count_fold, summary_of


def cli_turn(session_id, n, parent):
    u = str(uuid.uuid4())
    user = {"type": "user", "uuid": u, "parentUuid": parent, "sessionId": session_id,
            "message": {"role": "user", "content": "prompt %d" % n}}
    latch = {"type": "atis-latch", "sessionId": session_id}
    api = {"type": "api-request", "requestId": "req_%d" % n, "sessionId": session_id}
    last = {"type": "last-prompt", "lastPrompt": "prompt %d" % n, "sessionId": session_id}
    return [latch, user, api, latch, last], [latch, user, latch, last], u


def cli_write(root, project, session_id, lines):
    folder = os.path.join(root, "projects", project)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, session_id + ".jsonl"), "a", encoding="utf-8") as f:
        for line in lines:
            # As the CLI writes: JSON.stringify, no spaces, non-ASCII as is.
            f.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")


def test_config_dir_is_the_root(new_store, project, daemon):
    async def go():
        store = new_store(agent_config_dir=daemon.root, fold=count_fold)
        names = []
        original = store._unary

        def spy(name, request):
            names.append(name)
            return original(name, request)

        store._unary = spy
        s, parent, want = sid(), None, []
        for n in (1, 2, 3):
            lines, mirrored, parent = cli_turn(s, n, parent)
            cli_write(daemon.root, project, s, lines)
            want += lines
            names.clear()
            await store.append(key(project, s), mirrored)
            if n > 1:
                assert names == ["Append"], "turn %d folded the whole transcript again: %s" % (n, names)
        assert await store.load(key(project, s)) == want
        # Turn 1 folded the transcript (the CLI's 5 lines) and its batch of
        # 4 (see the README's limits); each later turn its batch alone.
        assert await summary_of(store, project, s) == {"count": 5 + 4 + 4 + 4, "batches": 4}

    run(go())


def test_config_dir_an_alias_of_the_root(new_store, project, daemon):
    alias = daemon.base + "/alias-of-root"
    if not os.path.lexists(alias):
        os.symlink(daemon.root, alias)

    async def go():
        store = new_store(agent_config_dir=alias + "/")
        s = sid()
        line = {"type": "queue-operation", "operation": "enqueue", "sessionId": s}
        cli_write(daemon.root, project, s, [line])
        await store.append(key(project, s), [line])
        assert await store.load(key(project, s)) == [line]

    run(go())
