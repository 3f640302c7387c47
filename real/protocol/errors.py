"""Errors of reaching the coordinator, torch-free so the CLI can name them cheaply.

Each is a request that cannot work (a one-line message, exit status 2), not a bug.
"""

from __future__ import annotations

from .secret import SecretError

__all__ = ["ConnectError", "ListenError", "SecretError"]


class ListenError(ValueError):
    """The store cannot listen where it was asked (bad host or port, port in use)."""


class ConnectError(ValueError):
    """The coordinator could not be reached, or does not answer as one."""
