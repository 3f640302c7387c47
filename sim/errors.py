"""The simulator's error: bad configuration or input, with a message that names it."""

from __future__ import annotations


class SimError(ValueError):
    """A simulation cannot be set up (unknown model, key, calibration; bad values)."""
