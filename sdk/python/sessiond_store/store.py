"""SessiondStore: the Claude Agent SDK's SessionStore, kept by sessiond."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import random
import threading
import time
import uuid
import weakref
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import grpc
import grpc.aio

from . import _trust
from ._encode import decode_entry, encode_entry
from ._errors import (
    REASON_SUMMARY_CONFLICT,
    SessiondError,
    SessiondUnavailableError,
    UntrustedSocketError,
    sessiond_reason,
)
from ._layout import default_socket
from .gen import sessiond_pb2 as pb
from .gen import sessiond_pb2_grpc as pb_grpc

log = logging.getLogger("sessiond_store")

Fold = Callable[..., Any]


def _sdk_fold() -> Optional[Fold]:
    """The official SDK's summary fold, when the SDK is installed and has one."""
    try:
        import claude_agent_sdk  # type: ignore[import-not-found]
    except Exception:  # not installed, or broken: summaries off
        return None
    fold = getattr(claude_agent_sdk, "fold_session_summary", None)
    return fold if callable(fold) else None


class _Default:
    def __repr__(self) -> str:
        return "<the SDK's fold_session_summary when installed>"


SDK_FOLD: Any = _Default()

_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

# sessiond's limit on a summary (SummaryUpdate.data).
MAX_SUMMARY_BYTES = 32 << 10


def _field(key: Any, snake: str, camel: str) -> Any:
    if isinstance(key, Mapping):
        value = key.get(snake)
        return key.get(camel) if value is None else value
    value = getattr(key, snake, None)
    return getattr(key, camel, None) if value is None else value


def _parse_key(key: Any) -> Tuple[str, str, str]:
    """(project_key, session_id, subpath) of a SessionStore key; subpath is
    "" for the main transcript."""
    project_key = _field(key, "project_key", "projectKey")
    session_id = _field(key, "session_id", "sessionId")
    subpath = _field(key, "subpath", "subpath")
    if not isinstance(project_key, str) or not project_key:
        raise ValueError("SessionStore key without a project_key: %r" % (key,))
    if not isinstance(session_id, str) or not session_id:
        raise ValueError("SessionStore key without a session_id: %r" % (key,))
    if subpath is None:
        subpath = ""
    elif not isinstance(subpath, str) or subpath == "":
        # An empty subpath is not the main transcript: the contract leaves
        # it out for that. Refuse it rather than guess.
        raise ValueError("SessionStore key with an empty or non-string subpath: %r" % (key,))
    return project_key, session_id, subpath


def _ref(project_key: str, session_id: str, subpath: str = "") -> "pb.SessionRef":
    return pb.SessionRef(project_key=project_key, session_id=session_id, subpath=subpath)


def _chunks(payload: Sequence[bytes], limit: int) -> List[List[bytes]]:
    """Entries split into batches of at most limit bytes (an entry larger
    than limit travels alone: sessiond decides whether it fits)."""
    out: List[List[bytes]] = [[]]
    size = 0
    for data in payload:
        if out[-1] and size + len(data) > limit:
            out.append([])
            size = 0
        out[-1].append(data)
        size += len(data)
    return out


class SessiondStore:
    """A SessionStore whose transcripts sessiond keeps.

    SessiondStore() talks to the daemon at the default socket (the same one
    sessiond picks: SESSIOND_SOCKET, XDG_RUNTIME_DIR, ...);
    SessiondStore(socket_path=...) to another. Nothing is sent to a socket
    served by another user (UntrustedSocketError).

    fold: how the session summary is folded from each appended batch, called
    as fold(previous_summary_or_None, key, entries) and returning
    {"session_id", "mtime", "data"}. By default the SDK's
    fold_session_summary when claude_agent_sdk is installed and has it; None
    turns summaries off.

    agent_config_dir: the CLAUDE_CONFIG_DIR of the agent whose transcripts
    are mirrored here; by default $CLAUDE_CONFIG_DIR, else ~/.claude, read at
    each append. sessiond refuses appends when it is its own root (the CLI
    and sessiond would both write each file).

    timeout: seconds one call may take. Calls that fail with UNAVAILABLE or
    DEADLINE_EXCEEDED are tried again, up to tries attempts, while less than
    retry_window seconds have passed since the first (an append keeps its
    batch id, so the daemon stores it once).
    """

    def __init__(
        self,
        socket_path: Optional[str] = None,
        *,
        fold: Any = SDK_FOLD,
        agent_config_dir: Optional[str] = None,
        timeout: float = 30.0,
        tries: int = 3,
        retry_window: float = 10.0,
        backoff: Sequence[float] = (1.0, 4.0),
        max_batch_bytes: int = 48 << 20,
    ) -> None:
        self.socket_path = socket_path if socket_path else default_socket()
        self.fold: Optional[Fold] = _sdk_fold() if isinstance(fold, _Default) else fold
        self._agent_config_dir = agent_config_dir
        self._timeout = timeout
        self._tries = max(1, tries)
        self._retry_window = retry_window
        self._backoff = tuple(backoff) or (1.0,)
        self._max_batch_bytes = max_batch_bytes
        # One connection per event loop: a gRPC channel belongs to the loop
        # it was made in, and agents may run the store from several
        # (asyncio.run called more than once, threads).
        self._conns: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Conn]" = weakref.WeakKeyDictionary()
        self._conns_lock = threading.Lock()
        # (project_key, session_id) -> (version, summary) last stored by us.
        self._summaries: Dict[Tuple[str, str], Tuple[int, Optional[Dict[str, Any]]]] = {}

    def __repr__(self) -> str:
        return "SessiondStore(socket_path=%r)" % self.socket_path

    # ---- connection ------------------------------------------------------

    def _conn(self) -> "_Conn":
        loop = asyncio.get_running_loop()
        with self._conns_lock:
            conn = self._conns.get(loop)
            if conn is None:
                conn = self._conns[loop] = _Conn()
            return conn

    async def _get_stub(self) -> Tuple[pb_grpc.SessiondStub, int]:
        conn = self._conn()
        if conn.stub is not None:
            return conn.stub, conn.generation
        async with conn.lock:
            if conn.stub is None:
                # Trust check first (see _trust): the folder is private to us
                # or root, and the process serving the socket is ours or
                # root's. gRPC then connects on its own, now and on every
                # reconnect; the folder check is what makes that safe, since
                # nobody else can swap the socket in a folder they cannot
                # write. The probe connects a socket of its own: off the loop.
                await asyncio.get_running_loop().run_in_executor(None, _trust.verify, self.socket_path)
                conn.channel = grpc.aio.insecure_channel(
                    "unix:" + self.socket_path,
                    options=[
                        ("grpc.max_receive_message_length", -1),
                        ("grpc.max_send_message_length", -1),
                    ],
                )
                conn.stub = pb_grpc.SessiondStub(conn.channel)
                conn.generation += 1
            return conn.stub, conn.generation

    def _drop_channel(self, generation: int) -> None:
        """Forget a channel whose daemon went away, so the next call checks
        the socket again (the daemon may have been replaced) and connects at
        once instead of waiting out gRPC's reconnect backoff. Calls still
        running on it get a while to finish."""
        conn = self._conn()
        if generation != conn.generation or conn.channel is None:
            return
        channel, conn.channel, conn.stub = conn.channel, None, None
        task = asyncio.get_running_loop().create_task(channel.close(grace=self._timeout))
        conn.closing.add(task)
        task.add_done_callback(conn.closing.discard)

    async def close(self) -> None:
        """Close this event loop's connection (a later call opens a new one)."""
        conn = self._conn()
        channel, conn.channel, conn.stub = conn.channel, None, None
        if channel is not None:
            await channel.close()

    async def __aenter__(self) -> "SessiondStore":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # ---- calls -------------------------------------------------------------

    def _error(self, what: str, exc: grpc.aio.AioRpcError) -> SessiondError:
        code = exc.code()
        reason = sessiond_reason(exc.trailing_metadata())
        message = "sessiond %s: %s (%s)" % (what, exc.details() or "", code.name if code else "?")
        if code == grpc.StatusCode.UNAVAILABLE:
            return SessiondUnavailableError(message, code=code, reason=reason)
        return SessiondError(message, code=code, reason=reason)

    async def _call(self, what: str, invoke: Callable[[pb_grpc.SessiondStub], Awaitable[Any]]) -> Any:
        """invoke(stub) with the retry policy (see the class docstring).
        Raises SessiondError; UntrustedSocketError is never retried."""
        start = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            generation = None
            try:
                stub, generation = await self._get_stub()
                return await invoke(stub)
            except UntrustedSocketError:
                raise
            except SessiondUnavailableError as exc:
                err: SessiondError = exc
            except grpc.aio.AioRpcError as exc:
                err = self._error(what, exc)
                if exc.code() == grpc.StatusCode.UNAVAILABLE and generation is not None:
                    self._drop_channel(generation)
            retryable = isinstance(err, SessiondUnavailableError) or err.code in _RETRYABLE
            delay = self._backoff[min(attempt - 1, len(self._backoff) - 1)]
            if not retryable or attempt >= self._tries or time.monotonic() - start + delay > self._retry_window:
                raise err
            log.debug("%s failed (%s); retrying in %.1fs", what, err, delay)
            await asyncio.sleep(delay)

    def _unary(self, name: str, request: Any) -> Callable[[pb_grpc.SessiondStub], Awaitable[Any]]:
        def invoke(stub: pb_grpc.SessiondStub) -> Awaitable[Any]:
            return getattr(stub, name)(request, timeout=self._timeout)

        return invoke

    # ---- SessionStore ----------------------------------------------------

    async def append(self, key: Any, entries: Sequence[Any]) -> None:
        """Store entries at the end of the transcript key names, durably.

        Each call is one batch with a fresh id, so a retry (ours or the
        SDK's after a lost answer) cannot store it twice; entries whose uuid
        the transcript already holds are not stored again either.
        """
        project_key, session_id, subpath = _parse_key(key)
        entries = list(entries)
        if not entries:
            return
        payload = [encode_entry(e) for e in entries]
        batch_id = str(uuid.uuid4())
        chunks = _chunks(payload, self._max_batch_bytes)
        config_dir = self._agent_config_dir or os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(
            os.path.expanduser("~"), ".claude"
        )
        for i, chunk in enumerate(chunks):
            request = pb.AppendRequest(
                session=_ref(project_key, session_id, subpath),
                entries=chunk,
                batch_id=batch_id if len(chunks) == 1 else "%s.%d" % (batch_id, i),
                agent_config_dir=config_dir,
            )
            last = i == len(chunks) - 1
            if last and self.fold is not None and subpath == "":
                # The summary goes with the last part, folded over them all.
                await self._append_with_summary(request, key, entries, project_key, session_id)
            else:
                await self._call("append to %s/%s" % (project_key, session_id), self._unary("Append", request))

    async def _append_with_summary(
        self, request: Any, key: Any, entries: List[Any], project_key: str, session_id: str
    ) -> None:
        what = "append to %s/%s" % (project_key, session_id)
        cache_key = (project_key, session_id)
        for conflicts in range(100):
            version, previous = self._summaries.get(cache_key, (0, None))
            summary = await self._fold(previous, key, entries)
            data = encode_entry(summary.get("data", {}))
            if len(data) > MAX_SUMMARY_BYTES:
                log.warning(
                    "%s: the folded summary is %d bytes, over sessiond's %d: stored the entries "
                    "without updating the summary",
                    what,
                    len(data),
                    MAX_SUMMARY_BYTES,
                )
                request.ClearField("summary")
                await self._call(what, self._unary("Append", request))
                return
            request.summary.CopyFrom(pb.SummaryUpdate(data=data, expected_version=version))
            try:
                response = await self._call(what, self._unary("Append", request))
            except SessiondError as exc:
                if exc.code != grpc.StatusCode.ABORTED or exc.reason != REASON_SUMMARY_CONFLICT:
                    raise
                # Someone else stored a summary since ours: nothing of this
                # batch was stored. Fold onto theirs and send it again, with
                # the same batch id.
                self._summaries[cache_key] = await self._current_summary(project_key, session_id)
                if conflicts >= 3:
                    await asyncio.sleep(random.uniform(0, 0.005 * conflicts))
                continue
            if response.duplicate_batch:
                # Stored by an earlier attempt whose answer was lost: the
                # summary stored then is not known here.
                self._summaries.pop(cache_key, None)
            else:
                self._summaries[cache_key] = (response.summary_version, summary)
            return
        raise SessiondError("%s: the summary kept changing under 100 attempts to update it" % what)

    async def _fold(self, previous: Optional[Dict[str, Any]], key: Any, entries: List[Any]) -> Dict[str, Any]:
        assert self.fold is not None
        result = self.fold(previous, key, entries)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, Mapping):
            raise TypeError("fold returned %r, not a summary mapping with a data field" % (result,))
        return dict(result)

    async def _current_summary(self, project_key: str, session_id: str) -> Tuple[int, Optional[Dict[str, Any]]]:
        request = pb.ListSummariesRequest(project_key=project_key, session_id=session_id)
        try:
            response = await self._call("list summaries of %s" % project_key, self._unary("ListSummaries", request))
        except SessiondError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                return 0, None
            raise
        for s in response.summaries:
            if s.session_id == session_id:
                return s.version, {"session_id": s.session_id, "mtime": s.mtime_ms, "data": _summary_data(s.data)}
        return 0, None

    async def load(self, key: Any) -> Optional[List[Dict[str, Any]]]:
        """The transcript's entries in order, or None when it was never
        written (or was deleted). Lines that are not a JSON object are
        skipped, as the official readers skip them."""
        project_key, session_id, subpath = _parse_key(key)
        request = pb.ReadRequest(session=_ref(project_key, session_id, subpath))

        async def read_all(stub: pb_grpc.SessiondStub) -> List[Dict[str, Any]]:
            out: List[Dict[str, Any]] = []
            async for response in stub.Read(request, timeout=self._timeout):
                for entry in response.entries:
                    if entry.malformed:
                        continue
                    value = decode_entry(entry.data)
                    if value is not None:
                        out.append(value)
            return out

        try:
            return await self._call("read %s/%s" % (project_key, session_id), read_all)
        except SessiondError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                return None
            raise

    async def list_sessions(self, project_key: str) -> List[Dict[str, Any]]:
        """[{"session_id", "mtime"}] of the project's main transcripts, mtime
        in epoch milliseconds; [] for a project sessiond does not know."""
        request = pb.ListSessionsRequest(project_key=project_key)
        try:
            response = await self._call("list %s" % project_key, self._unary("ListSessions", request))
        except SessiondError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                return []
            raise
        return [{"session_id": s.session.session_id, "mtime": s.modified_ms} for s in response.sessions]

    async def list_session_summaries(self, project_key: str) -> List[Dict[str, Any]]:
        """[{"session_id", "mtime", "data"}] for the project's sessions that
        have a summary, in one call."""
        request = pb.ListSummariesRequest(project_key=project_key)
        try:
            response = await self._call("list summaries of %s" % project_key, self._unary("ListSummaries", request))
        except SessiondError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                return []
            raise
        return [
            {"session_id": s.session_id, "mtime": s.mtime_ms, "data": _summary_data(s.data)}
            for s in response.summaries
        ]

    async def delete(self, key: Any) -> None:
        """Move the transcript to sessiond's trash (a main key takes its
        subagent transcripts along). Deleting what does not exist succeeds."""
        project_key, session_id, subpath = _parse_key(key)
        request = pb.DeleteRequest(session=_ref(project_key, session_id, subpath))
        try:
            await self._call("delete %s/%s" % (project_key, session_id), self._unary("Delete", request))
        except SessiondError as exc:
            if exc.code != grpc.StatusCode.NOT_FOUND:
                raise
        if subpath == "":
            self._summaries.pop((project_key, session_id), None)

    async def list_subkeys(self, key: Any) -> List[str]:
        """The session's subagent transcripts ("subagents/agent-..."), without
        the main one; [] for an unknown session."""
        project_key, session_id, _ = _parse_key(key)
        request = pb.ListSubkeysRequest(session=_ref(project_key, session_id))
        try:
            response = await self._call("list subkeys of %s/%s" % (project_key, session_id), self._unary("ListSubkeys", request))
        except SessiondError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                return []
            raise
        return list(response.subkeys)


class _Conn:
    """A store's connection in one event loop."""

    def __init__(self) -> None:
        self.channel: Optional[grpc.aio.Channel] = None
        self.stub: Optional[pb_grpc.SessiondStub] = None
        self.lock = asyncio.Lock()
        self.generation = 0
        self.closing: "set[asyncio.Task[None]]" = set()


def _summary_data(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8")) if data else {}
    except (UnicodeDecodeError, ValueError):
        return {}
