"""Errors raised by SessiondStore, and the reading of sessiond's ErrorInfo
details from a failed call."""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional, Tuple

# ErrorInfo domain and reasons sessiond attaches to its errors
# (api/proto/sessiond/v1/errors.go).
ERROR_DOMAIN = "sessiond"
REASON_NOT_PROCESSED = "NOT_PROCESSED"
REASON_SUMMARY_CONFLICT = "SUMMARY_CONFLICT"

_ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"


class SessiondError(Exception):
    """A call to sessiond failed. code is the grpc.StatusCode (None when the
    call never reached the daemon), reason the ErrorInfo reason when sessiond
    gave one."""

    def __init__(self, message: str, code: Any = None, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


class SessiondUnavailableError(SessiondError, ConnectionError):
    """No daemon answers at the socket (not started, stopped, restarting).
    Appends retry it a few times before giving up."""


class UntrustedSocketError(SessiondError, PermissionError):
    """The socket is served, or its folder is controlled, by another user:
    whatever is sent there would hand this user's transcripts to someone
    else. Nothing was sent. Never retried: a person has to look."""

    def __init__(
        self,
        *,
        socket: str,
        folder: str,
        own_uid: int,
        server_uid: Optional[int] = None,
        server_pid: Optional[int] = None,
        folder_uid: Optional[int] = None,
        folder_link: Optional[str] = None,
        reason: str = "",
    ) -> None:
        self.socket = socket
        self.folder = folder
        self.own_uid = own_uid
        self.server_uid = server_uid
        self.server_pid = server_pid
        self.folder_uid = folder_uid
        self.folder_link = folder_link
        parts = ["refusing the sessiond socket %s: " % socket]
        if server_uid is not None:
            parts.append(
                "the process serving it runs as uid %d (pid %s), neither you (uid %d) nor root"
                % (server_uid, server_pid, own_uid)
            )
            if folder_link is not None:
                parts.append("; its folder %s is a symlink to %s" % (folder, folder_link))
            elif folder_uid is not None and folder_uid != own_uid:
                parts.append("; its folder %s is owned by uid %d" % (folder, folder_uid))
        else:
            parts.append(reason)
            if folder_link is not None and folder_uid is not None:
                parts.append(" (the link is owned by uid %d)" % folder_uid)
        parts.append(
            ". Nothing was sent to it. Someone else may have set it up to collect your "
            "transcripts: check who made %s and remove it, or set SESSIOND_SOCKET (or "
            "XDG_RUNTIME_DIR) to a folder that only you own and run sessiond there" % folder
        )
        super().__init__("".join(parts), code=None, reason="UNTRUSTED_SOCKET")


# A few lines of protobuf wire decoding, enough for google.rpc.Status and
# google.rpc.ErrorInfo (Debian packages no Python googleapis-common-protos).


def _varint(buf: bytes, pos: int) -> Tuple[int, int]:
    shift = 0
    value = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: bytes) -> Iterator[Tuple[int, Any]]:
    """(field number, value) of each field: ints for varints, bytes for
    length-delimited fields; fixed-size fields are skipped."""
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, value
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise ValueError("truncated field")
            yield number, buf[pos : pos + size]
            pos += size
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError("unsupported wire type %d" % wire)


def error_reasons(status_details: bytes) -> Iterator[Tuple[str, str]]:
    """(domain, reason) of every ErrorInfo in a serialized google.rpc.Status."""
    for number, value in _fields(status_details):
        if number != 3 or not isinstance(value, bytes):  # Status.details (Any)
            continue
        type_url = b""
        payload = b""
        for n, v in _fields(value):
            if n == 1 and isinstance(v, bytes):
                type_url = v
            elif n == 2 and isinstance(v, bytes):
                payload = v
        if type_url.decode("utf-8", "replace") != _ERROR_INFO_TYPE:
            continue
        reason = domain = ""
        for n, v in _fields(payload):
            if n == 1 and isinstance(v, bytes):
                reason = v.decode("utf-8", "replace")
            elif n == 2 and isinstance(v, bytes):
                domain = v.decode("utf-8", "replace")
        yield domain, reason


def sessiond_reason(trailing_metadata: Optional[Iterable[Tuple[str, Any]]]) -> str:
    """The ErrorInfo reason sessiond attached to a failed call, or ""."""
    for key, value in trailing_metadata or ():
        if key != "grpc-status-details-bin" or not isinstance(value, (bytes, bytearray)):
            continue
        try:
            for domain, reason in error_reasons(bytes(value)):
                if domain == ERROR_DOMAIN:
                    return reason
        except ValueError:
            return ""
    return ""
