"""A SessionStore for the Claude Agent SDK that keeps transcripts in sessiond.

    from sessiond_store import SessiondStore
    options = ClaudeAgentOptions(session_store=SessiondStore())
"""

from ._errors import SessiondError, SessiondUnavailableError, UntrustedSocketError
from ._layout import default_socket
from .store import SessiondStore

__all__ = [
    "SessiondStore",
    "SessiondError",
    "SessiondUnavailableError",
    "UntrustedSocketError",
    "default_socket",
]
__version__ = "0.1.0"
