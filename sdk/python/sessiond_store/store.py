"""SessiondStore: the Claude Agent SDK's SessionStore, kept by sessiond."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import logging
import os
import random
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

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


_warned_no_fold = False


def _warn_no_fold() -> None:
    """Says once per process that the default fold is missing: without it
    list_session_summaries has nothing of this store's to return, which
    would otherwise look like a project without sessions."""
    global _warned_no_fold
    if _warned_no_fold:
        return
    _warned_no_fold = True
    log.warning(
        "claude_agent_sdk (or its fold_session_summary) cannot be imported: this store keeps no session "
        "summaries, and list_session_summaries returns only those another writer folded; install the "
        "Agent SDK in this Python, or pass fold= (None turns summaries off without this warning)"
    )


class _Default:
    def __repr__(self) -> str:
        return "<the SDK's fold_session_summary when installed>"


SDK_FOLD: Any = _Default()

_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

# The codes gRPC itself answers with (the daemon's own answers carry a
# reason): their text is gRPC's, not sessiond's.
_TRANSPORT_CODES = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.UNAUTHENTICATED,
)


def _explain(code: Any, details: str, socket_path: str) -> str:
    """What a person can act on, for a failure gRPC reported itself."""
    if "EACCES" in details or "ermission denied" in details:
        return "permission denied on sessiond's socket %s: it or its folder is not yours; run sessiond as you" % socket_path
    if code == grpc.StatusCode.UNAVAILABLE:
        return (
            "no answer from sessiond at %s (it stopped, is restarting, or was never started): "
            "start sessiond, or point SESSIOND_SOCKET at the socket it serves" % socket_path
        )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return (
            "sessiond at %s did not answer in time (busy, or waiting on a slow disk): try again; "
            "`sessionctl status` shows what it is doing, and its log says why" % socket_path
        )
    if code == grpc.StatusCode.CANCELLED:
        return "the call was cancelled before sessiond answered"
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return "sessiond at %s does not know this call: it is older than this adapter; upgrade sessiond" % socket_path
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return "sessiond at %s refused the connection; check that it runs as you" % socket_path
    return "sessiond at %s failed in a way it did not explain: its log says more" % socket_path

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
    each append. When it is sessiond's root (both on their defaults), the
    CLI's copy of each transcript is sessiond's file: sessiond takes in the
    CLI's lines and answers their mirrored copies as duplicates.

    timeout: seconds one call may take (load_timeout for reading a whole
    transcript). Calls that fail with UNAVAILABLE or DEADLINE_EXCEEDED, or
    find no daemon, are tried again, up to tries attempts, backoff seconds
    apart, none started retry_window seconds after the first (an append
    keeps its batch id, so the daemon stores it once).

    max_batch_bytes: an append whose entries exceed it is sent as several
    requests (sessiond takes 64 MiB per request by default).
    """

    def __init__(
        self,
        socket_path: Optional[str] = None,
        *,
        fold: Any = SDK_FOLD,
        agent_config_dir: Optional[str] = None,
        timeout: float = 30.0,
        load_timeout: float = 120.0,
        tries: int = 3,
        retry_window: float = 10.0,
        backoff: Sequence[float] = (1.0, 4.0),
        max_batch_bytes: int = 48 << 20,
    ) -> None:
        self.socket_path = socket_path if socket_path else default_socket()
        self.fold: Optional[Fold] = _sdk_fold() if isinstance(fold, _Default) else fold
        if isinstance(fold, _Default) and self.fold is None:
            _warn_no_fold()
        self._agent_config_dir = agent_config_dir
        self._timeout = timeout
        self._load_timeout = load_timeout
        self._tries = max(1, tries)
        self._retry_window = retry_window
        self._backoff = tuple(backoff) or (1.0,)
        self._max_batch_bytes = max_batch_bytes
        # One connection per event loop: a gRPC channel belongs to the loop
        # it was made in, and agents may run the store from several
        # (asyncio.run called more than once, threads).
        self._conns: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Conn]" = weakref.WeakKeyDictionary()
        self._conns_lock = threading.Lock()
        # (project_key, session_id) -> the summary this store last stored.
        self._summaries: Dict[Tuple[str, str], _Summary] = {}
        self._summaries_unsupported = False
        self._batch_ids = _BatchIds()

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
        stub, generation = conn.stub, conn.generation
        if stub is not None:
            if conn.channel.get_state(try_to_connect=False) != grpc.ChannelConnectivity.READY:
                # Not connected now (the daemon restarted, or the channel
                # went idle): gRPC would connect again, on its own, to
                # whatever serves the path by then, so check it first.
                await asyncio.get_running_loop().run_in_executor(None, _trust.verify, self.socket_path)
            if conn.stub is stub:
                return stub, generation
            # Another call dropped the channel during the check (the daemon
            # went away): connect anew, as for a first call.
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
        running on it may finish: the channel is closed once the longest
        deadline a call can have has passed (an UNAVAILABLE answer to one
        call, a daemon draining say, does not mean the others' connection
        is gone). close(grace=...) is no use here: it waits only for calls
        it finds in a task's outermost frame, and cancels the rest at once."""
        conn = self._conn()
        if generation != conn.generation or conn.channel is None:
            return
        channel, conn.channel, conn.stub = conn.channel, None, None
        linger = max(self._timeout, self._load_timeout)

        async def close_later() -> None:
            try:
                await asyncio.sleep(linger)
            finally:
                # Also when the loop shuts down and cancels this task.
                await channel.close()

        task = asyncio.get_running_loop().create_task(close_later())
        conn.closing.add(task)
        task.add_done_callback(conn.closing.discard)

    async def close(self) -> None:
        """Close this event loop's connection (a later call opens a new one),
        and the dropped ones still waiting out their calls' deadlines."""
        conn = self._conn()
        channel, conn.channel, conn.stub = conn.channel, None, None
        if channel is not None:
            await channel.close()
        for task in list(conn.closing):
            task.cancel()  # its finally closes the channel
        if conn.closing:
            await asyncio.gather(*conn.closing, return_exceptions=True)

    async def __aenter__(self) -> "SessiondStore":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # ---- calls -------------------------------------------------------------

    def _error(self, what: str, exc: grpc.aio.AioRpcError) -> SessiondError:
        code = exc.code()
        reason = sessiond_reason(exc.trailing_metadata())
        details = exc.details() or ""
        if not details or (code in _TRANSPORT_CODES and not reason):
            # gRPC's own text ("Deadline Exceeded", "failed to connect to
            # all addresses; last error: ..."), not sessiond's: say what
            # happened and what to do instead.
            details = _explain(code, details, self.socket_path)
        message = "sessiond %s: %s (%s)" % (what, details, code.name if code else "?")
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

    def _pages(
        self, name: str, request: Any, items: Callable[[Any], Sequence[Any]]
    ) -> Callable[[pb_grpc.SessiondStub], Awaitable[List[Any]]]:
        """A server-streaming call answered in pages (the listings): the
        items of every page, once the stream ended well."""

        async def invoke(stub: pb_grpc.SessiondStub) -> List[Any]:
            out: List[Any] = []
            async for response in getattr(stub, name)(request, timeout=self._timeout):
                out.extend(items(response))
            return out

        return invoke

    # ---- SessionStore ----------------------------------------------------

    async def append(self, key: Any, entries: Sequence[Any]) -> None:
        """Store entries at the end of the transcript key names, durably.

        Each call is one batch with its own id, so our retries cannot store
        it twice. The SDK retries a failed append by calling again with the
        same entries: when the last call for this transcript with exactly
        these entries failed, the id is reused, so a batch that the daemon
        stored before its answer was lost is not stored again. Entries whose
        uuid the transcript already holds are not stored again either.
        Appends to one transcript are sent one at a time, in call order.
        """
        project_key, session_id, subpath = _parse_key(key)
        entries = list(entries)
        if not entries:
            return
        payload = [encode_entry(e) for e in entries]
        transcript = (project_key, session_id, subpath)
        digest = _digest(payload)
        batch_id = self._batch_ids.reuse(transcript, digest)
        # No await before the queue: the order of calls is the order of
        # arrival in it.
        async with self._in_order(transcript):
            try:
                await self._append_in_order(key, entries, payload, batch_id, transcript)
            except BaseException:
                self._batch_ids.failed(transcript, digest, batch_id)
                raise
        self._batch_ids.forget(transcript, digest)

    @contextlib.asynccontextmanager
    async def _in_order(self, transcript: Tuple[str, str, str]) -> AsyncIterator[None]:
        queues = self._conn().queues
        slot = queues.get(transcript)
        if slot is None:
            slot = queues[transcript] = _Queue()
        slot.users += 1
        try:
            async with slot.lock:  # asyncio.Lock wakes waiters in FIFO order
                yield
        finally:
            slot.users -= 1
            if slot.users == 0:
                queues.pop(transcript, None)

    async def _append_in_order(
        self, key: Any, entries: List[Any], payload: List[bytes], batch_id: str, transcript: Tuple[str, str, str]
    ) -> None:
        project_key, session_id, subpath = transcript
        what = "append to %s/%s%s" % (project_key, session_id, "/" + subpath if subpath else "")
        summarise = self.fold is not None and subpath == "" and not self._summaries_unsupported
        chunks = _chunks(payload, self._max_batch_bytes)
        base: Optional[_Summary] = None
        if summarise and len(chunks) > 1:
            # Folded before the first part is stored: the summary sent with
            # the last part covers the lines the earlier parts add too.
            try:
                base = await self._summary_base(key, project_key, session_id)
            except UntrustedSocketError:
                raise
            except SessiondError as exc:
                # The transcript comes first (see _send_with_summary).
                log.warning("%s: cannot read the summary to fold onto (%s); the entries are stored without updating the summary", what, exc)
                summarise = False
                self._summaries.pop((project_key, session_id), None)
        # As the CLI resolves it: a relative CLAUDE_CONFIG_DIR against the
        # working directory (sessiond takes only absolute paths).
        config_dir = os.path.abspath(
            self._agent_config_dir
            or os.environ.get("CLAUDE_CONFIG_DIR")
            or os.path.join(os.path.expanduser("~"), ".claude")
        )
        for i, chunk in enumerate(chunks):
            request = pb.AppendRequest(
                session=_ref(project_key, session_id, subpath),
                entries=chunk,
                # A batch too big for one request goes as several, each with
                # an id derived from the batch's.
                batch_id=batch_id if len(chunks) == 1 else "%s.%d" % (batch_id, i),
                agent_config_dir=config_dir,
            )
            if summarise and i == len(chunks) - 1:
                await self._send_with_summary(what, request, key, entries, base)
                return
            response = await self._call(what, self._unary("Append", request))
            if base is not None and base.covered is not None:
                base.covered += _stored(response) + response.absorbed_entries

    async def _send_with_summary(
        self, what: str, request: Any, key: Any, entries: List[Any], base: Optional[_Summary]
    ) -> None:
        project_key, session_id = request.session.project_key, request.session.session_id
        cache_key = (project_key, session_id)
        for conflicts in range(_MAX_SUMMARY_CONFLICTS):
            problem = ""
            try:
                if base is None:
                    base = await self._summary_base(key, project_key, session_id)
            except UntrustedSocketError:
                raise
            except SessiondError as exc:
                # A read that fails (damage in the session's journal, the
                # daemon out of descriptors) must not keep the batch from
                # being stored: the Append may well succeed.
                problem = "cannot read the summary to fold onto (%s)" % (exc,)
            if not problem:
                try:
                    if self._summaries_unsupported:
                        await self._call(what, self._unary("Append", request))
                        return
                    folded = await self._fold(base.summary, key, entries)
                    data = _encode_summary(folded.get("data", {}))
                    if len(data) > MAX_SUMMARY_BYTES:
                        problem = "the folded summary is %d bytes, over sessiond's limit of %d" % (
                            len(data),
                            MAX_SUMMARY_BYTES,
                        )
                except SessiondError:
                    raise
                except Exception as exc:  # the fold is someone else's code
                    problem = "the summary fold failed: %r" % (exc,)
            if problem:
                # The transcript comes first: store the entries, leave the
                # summary as it was (sessiond then reports it stale, so the
                # SDK reads the session itself).
                log.warning("%s: %s; the entries are stored without updating the summary", what, problem)
                request.ClearField("summary")
                await self._call(what, self._unary("Append", request))
                if base is None:
                    self._summaries.pop(cache_key, None)
                else:
                    self._summaries[cache_key] = _Summary(base.version, None, None, rebuild=True)
                return
            # covers: the line count the fold started from; sessiond refuses
            # the summary (SUMMARY_CONFLICT) when lines were added without
            # one since, and the retry folds the whole transcript.
            request.summary.CopyFrom(pb.SummaryUpdate(
                data=data, expected_version=base.version,
                covers_entries=base.covered or 0, check_coverage=base.covered is not None,
                folder=SUMMARY_FOLDER))
            try:
                response = await self._call(what, self._unary("Append", request))
            except SessiondError as exc:
                self._summaries.pop(cache_key, None)
                if exc.code != grpc.StatusCode.ABORTED or exc.reason != REASON_SUMMARY_CONFLICT:
                    raise
                # Another writer stored a summary since the one we folded
                # onto; nothing of this batch was stored. Fold onto theirs
                # and send again, with the same batch id.
                base = None
                if conflicts >= 3:
                    await asyncio.sleep(random.uniform(0, 0.005 * conflicts))
                continue
            if response.duplicate_batch or response.summary_version == 0:
                # Stored by an earlier call whose answer was lost (with the
                # summary folded then), or by a daemon that keeps no
                # summaries: what is stored is not what we folded now.
                self._summaries.pop(cache_key, None)
            elif base.covered is not None and response.entries != base.covered + _stored(response) + response.absorbed_entries:
                # Lines appended without a summary (sessionctl rename or tag,
                # a store without a fold) since the summary we folded onto:
                # the next append folds the whole transcript again. (The
                # lines the agent's CLI wrote into the transcript itself,
                # when its config dir is sessiond's root, are counted apart,
                # absorbed_entries: this batch mirrors them.)
                self._summaries[cache_key] = _Summary(response.summary_version, None, None, rebuild=True)
            else:
                self._summaries[cache_key] = _Summary(response.summary_version, folded, response.entries)
            return
        raise SessiondError("%s: the summary kept changing through %d attempts to update it" % (what, _MAX_SUMMARY_CONFLICTS))

    async def _summary_base(self, key: Any, project_key: str, session_id: str) -> _Summary:
        """What the next batch of a session folds onto: the summary this
        store stored last; else the one sessiond holds; else (none yet, or
        one folded by another SDK, whose fields differ) a fold of the whole
        transcript, so the first summary stored covers the whole session and
        not only what this process appends."""
        cached = self._summaries.get((project_key, session_id))
        if cached is not None and not cached.rebuild:
            return cached.copy()
        if cached is not None:
            return await self._fold_transcript(key, project_key, session_id, cached.version)
        try:
            stored = await self._stored_summary(project_key, session_id)
        except SessiondError as exc:
            if exc.code != grpc.StatusCode.UNIMPLEMENTED:
                raise
            log.warning("sessiond at %s keeps no summaries (it predates ListSummaries)", self.socket_path)
            self._summaries_unsupported = True
            return _Summary(0, None, None)
        if stored is not None and _ours(stored.summary) and not stored.rebuild:
            return stored
        return await self._fold_transcript(key, project_key, session_id, stored.version if stored else 0)

    async def _fold_transcript(self, key: Any, project_key: str, session_id: str, version: int) -> _Summary:
        main = {"project_key": project_key, "session_id": session_id}
        lines = await self._read_lines(main, project_key, session_id, "")
        if not lines:
            return _Summary(version, None, 0)
        entries = _entries_of(lines)
        summary = await self._fold(None, main, entries) if entries else None
        return _Summary(version, summary, len(lines))

    async def _fold(self, previous: Optional[Dict[str, Any]], key: Any, entries: List[Any]) -> Dict[str, Any]:
        assert self.fold is not None
        result = self.fold(previous, key, entries)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, Mapping) or not isinstance(result.get("data", {}), Mapping):
            raise TypeError("the fold returned %r, not a summary with a data mapping" % (result,))
        return dict(result)

    async def _stored_summary(self, project_key: str, session_id: str) -> Optional[_Summary]:
        for s in await self._list_summaries(project_key, session_id):
            # sessiond stores a session under its lower-case id (one UUID
            # is one session in any case), whatever case the key has.
            if s.session_id.lower() == session_id.lower():
                summary = {"session_id": s.session_id, "mtime": s.mtime_ms, "data": _json_object(s.data)}
                # A summary missing lines added without one (a rename by
                # sessionctl, another client) is no base: rebuild.
                if s.covers_entries != s.entries:
                    return _Summary(s.version, summary, None, rebuild=True)
                return _Summary(s.version, summary, s.entries)
        return None

    async def _list_summaries(self, project_key: str, session_id: str = "") -> List[Any]:
        request = pb.ListSummariesRequest(project_key=project_key, session_id=session_id, folder=SUMMARY_FOLDER)
        try:
            return await self._call(
                "list the summaries of %s" % project_key, self._pages("ListSummaries", request, lambda r: r.summaries)
            )
        except SessiondError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                return []
            raise

    async def _read_lines(self, key: Any, project_key: str, session_id: str, subpath: str) -> Optional[List[Any]]:
        """Every line of a transcript (Entry messages), None when it has
        none or does not exist."""
        request = pb.ReadRequest(session=_ref(project_key, session_id, subpath))

        async def read_all(stub: pb_grpc.SessiondStub) -> List[Any]:
            out: List[Any] = []
            async for response in stub.Read(request, timeout=self._load_timeout):
                out.extend(response.entries)
            return out

        try:
            lines = await self._call("read %s/%s" % (project_key, session_id), read_all)
        except SessiondError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return lines or None

    async def load(self, key: Any) -> Optional[List[Dict[str, Any]]]:
        """The transcript's entries in order; None when it was never written
        (or was deleted). Lines that are not one JSON object (torn by a crash
        of another writer, or foreign) are skipped, as the official readers
        skip them."""
        project_key, session_id, subpath = _parse_key(key)
        lines = await self._read_lines(key, project_key, session_id, subpath)
        return None if lines is None else _entries_of(lines)

    async def list_sessions(self, project_key: str) -> List[Dict[str, Any]]:
        """[{"session_id", "mtime"}] of the project's main transcripts, mtime
        in epoch milliseconds; [] for a project sessiond does not know."""
        request = pb.ListSessionsRequest(project_key=project_key)
        try:
            sessions = await self._call("list %s" % project_key, self._pages("ListSessions", request, lambda r: r.sessions))
        except SessiondError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                return []
            raise
        return [{"session_id": s.session.session_id, "mtime": s.modified_ms} for s in sessions if s.session.subpath == ""]

    async def list_session_summaries(self, project_key: str) -> List[Dict[str, Any]]:
        """[{"session_id", "mtime", "data"}] for the project's sessions that
        have a summary, in one call. A summary another SDK folded (the
        TypeScript one names its fields differently) is left out: the SDK
        reads such a session itself."""
        try:
            listed = await self._list_summaries(project_key)
        except SessiondError as exc:
            if exc.code != grpc.StatusCode.UNIMPLEMENTED:
                raise
            return await self._fold_summaries(project_key)
        out = []
        for s in listed:
            data = _json_object(s.data)
            if _ours({"data": data}):
                out.append({"session_id": s.session_id, "mtime": s.mtime_ms, "data": data})
        return out

    async def _fold_summaries(self, project_key: str) -> List[Dict[str, Any]]:
        """Summaries folded from the transcripts, for a daemon that keeps
        none."""
        self._summaries_unsupported = True
        if self.fold is None:
            return []
        out = []
        for s in await self.list_sessions(project_key):
            main = {"project_key": project_key, "session_id": s["session_id"]}
            entries = await self.load(main)
            if entries:
                folded = await self._fold(None, main, entries)
                out.append({"session_id": s["session_id"], "mtime": s["mtime"], "data": folded.get("data", {})})
        return out

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
        finally:
            if subpath == "":
                self._summaries.pop((project_key, session_id), None)

    async def list_subkeys(self, key: Any) -> List[str]:
        """The session's subagent transcripts ("subagents/agent-..."), without
        the main one; [] for an unknown session."""
        project_key, session_id, _ = _parse_key(key)
        request = pb.ListSubkeysRequest(session=_ref(project_key, session_id))
        try:
            response = await self._call(
                "list the subkeys of %s/%s" % (project_key, session_id), self._unary("ListSubkeys", request)
            )
        except SessiondError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                return []
            raise
        return list(response.subkeys)


class _Conn:
    """A store's connection in one event loop, and the queues of appends
    waiting for their turn on each transcript."""

    def __init__(self) -> None:
        self.channel: Optional[grpc.aio.Channel] = None
        self.stub: Optional[pb_grpc.SessiondStub] = None
        self.lock = asyncio.Lock()
        self.generation = 0
        self.closing: "set[asyncio.Task[None]]" = set()
        self.queues: Dict[Tuple[str, str, str], _Queue] = {}


class _Queue:
    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class _Summary:
    """A session's summary as this store knows it: the version sessiond
    gave it (its compare-and-swap token), the summary itself
    ({"session_id", "mtime", "data"}; None before the first), the number of
    lines it covers when known, and rebuild when lines were appended without
    it, so the next append must fold the whole transcript."""

    __slots__ = ("version", "summary", "covered", "rebuild")

    def __init__(self, version: int, summary: Optional[Dict[str, Any]], covered: Optional[int], rebuild: bool = False):
        self.version = version
        self.summary = summary
        self.covered = covered
        self.rebuild = rebuild

    def copy(self) -> "_Summary":
        return _Summary(self.version, self.summary, self.covered, self.rebuild)


class _BatchIds:
    """Batch ids of appends that failed, by transcript and content, so that
    the SDK's retry of the same entries is sent under the same id. Kept
    five minutes (sessiond remembers ids for ten), at most 1024."""

    TTL = 300.0
    MAX = 1024

    def __init__(self) -> None:
        self._ids: "OrderedDict[Tuple[Tuple[str, str, str], bytes], Tuple[str, float]]" = OrderedDict()
        self._lock = threading.Lock()

    def reuse(self, transcript: Tuple[str, str, str], digest: bytes) -> str:
        now = time.monotonic()
        with self._lock:
            while self._ids:
                oldest = next(iter(self._ids.values()))
                if now - oldest[1] <= self.TTL:
                    break
                self._ids.popitem(last=False)
            hit = self._ids.get((transcript, digest))
        return hit[0] if hit else str(uuid.uuid4())

    def failed(self, transcript: Tuple[str, str, str], digest: bytes, batch_id: str) -> None:
        with self._lock:
            self._ids.pop((transcript, digest), None)
            self._ids[(transcript, digest)] = (batch_id, time.monotonic())
            while len(self._ids) > self.MAX:
                self._ids.popitem(last=False)

    def forget(self, transcript: Tuple[str, str, str], digest: bytes) -> None:
        with self._lock:
            self._ids.pop((transcript, digest), None)


_MAX_SUMMARY_CONFLICTS = 100

# SUMMARY_FOLDER names the Python SDK's summary format to sessiond, which
# keeps one summary per folder: a session the TypeScript or Ruby adapter
# also writes keeps each SDK's own, so neither refolds the other's.
SUMMARY_FOLDER = "claude-agent-sdk-python"

# Fields only the TypeScript SDK's foldSessionSummary writes (the Python one
# spells them in snake_case). A summary holding them was folded by a
# TypeScript store sharing the daemon; the Python SDK cannot read it.
_TS_SUMMARY_FIELDS = frozenset(
    {
        "isSidechain",
        "createdAt",
        "commandFallback",
        "firstPrompt",
        "firstPromptLocked",
        "customTitle",
        "aiTitle",
        "lastPrompt",
        "summaryHint",
        "gitBranch",
    }
)


def _ours(summary: Optional[Mapping[str, Any]]) -> bool:
    data = summary.get("data") if summary else None
    return isinstance(data, dict) and not (_TS_SUMMARY_FIELDS & data.keys())


def _json_object(data: bytes) -> Any:
    """A stored summary's data; None when it is not a JSON object."""
    try:
        value = json.loads(data.decode("utf-8")) if data else None
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _entries_of(lines: List[Any]) -> List[Dict[str, Any]]:
    out = []
    for line in lines:
        if line.malformed:
            continue
        value = decode_entry(line.data)
        if value is not None:
            out.append(value)
    return out


def _stored(response: Any) -> int:
    return sum(1 for r in response.results if r.outcome == pb.ENTRY_OUTCOME_STORED)


def _digest(payload: Sequence[bytes]) -> bytes:
    h = hashlib.sha256()
    for data in payload:
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.digest()


def _encode_summary(data: Dict[str, Any]) -> bytes:
    """The summary as sessiond stores it. One over sessiond's limit (a huge
    title or prompt) gets its longest strings shortened, as the TypeScript
    adapter does, rather than being dropped: a dropped summary makes every
    later append refold the whole transcript. The listing shows at most a
    few hundred characters of any of them."""
    out = encode_entry(data)
    if len(out) <= MAX_SUMMARY_BYTES:
        return out
    copy = dict(data)
    while len(out) > MAX_SUMMARY_BYTES:
        strings = [k for k, v in copy.items() if isinstance(v, str)]
        if not strings:
            break
        longest = max(strings, key=lambda k: len(copy[k]))
        if len(copy[longest]) <= 64:
            break
        copy[longest] = copy[longest][: max(64, len(copy[longest]) // 2)]
        out = encode_entry(copy)
    return out
