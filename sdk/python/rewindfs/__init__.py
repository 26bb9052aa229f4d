"""Client for the rewindfs daemon (see schema/protocol.md in the rewindfs repository)."""

from ._binary import binary_path
from .client import (
    AsyncRewindfsClient,
    RewindFilesResult,
    RewindfsClient,
    RewindfsError,
    find_socket,
)

__all__ = [
    "AsyncRewindfsClient",
    "RewindFilesResult",
    "RewindfsClient",
    "RewindfsError",
    "binary_path",
    "find_socket",
]
