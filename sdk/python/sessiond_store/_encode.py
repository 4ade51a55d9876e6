"""Entries to the bytes sessiond stores, and back."""

from __future__ import annotations

import json
import re
from typing import Any, Optional

# A UTF-16 surrogate code point on its own in a Python str. It has no UTF-8
# encoding, but JSON can still carry it as a \\uXXXX escape, which is how the
# CLI writes one (JSON.stringify escapes lone surrogates).
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogate(match: "re.Match[str]") -> str:
    return "\\u%04x" % ord(match.group())


def encode_entry(entry: Any) -> bytes:
    """One entry as compact JSON in UTF-8: key order kept, non-ASCII written
    as itself (U+2028/U+2029 included), lone surrogates escaped.

    Raises ValueError for what JSON cannot hold (NaN, infinities, circular
    references) and TypeError for values that are not JSON at all.
    """
    text = json.dumps(entry, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    # Outside string literals json.dumps writes only ASCII, so each raw
    # surrogate left in text is a character of some string (key or value).
    # Every backslash json.dumps wrote already ends a complete escape, so a
    # \\uXXXX put in the surrogate's place is one more escape of that string
    # and decodes back to the same code point. (Two surrogates that happen to
    # form a pair become one character when read back, as in any JSON.)
    return _SURROGATE.sub(_escape_surrogate, text).encode("utf-8")


def decode_entry(data: bytes) -> Optional[Any]:
    """A stored line back to its value; None for a line that is not one JSON
    object (the official readers skip those too). Bytes that are not UTF-8
    inside a line sessiond serves as valid (another writer's) become U+FFFD,
    as the SDK's own readers decode transcripts: dropping the line could
    drop a tool result the conversation needs."""
    try:
        value = json.loads(data.decode("utf-8", errors="replace"))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
