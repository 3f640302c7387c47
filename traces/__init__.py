"""traces: the canonical trace model, loaders for real trace formats, transformations,
calibrated generators, and the ``ooblab traces`` command.

Start with `load` (any supported file), `from_spec` (a file or a generator spec) and
`Trace` (the canonical form).
"""

from .errors import TraceError
from .load import DEFAULT_SEED, FORMATS, load, load_with_report
from .model import Trace, TraceEvent
from .rows import LoadReport
from .stats import TraceStats

__all__ = [
    "DEFAULT_SEED",
    "FORMATS",
    "LoadReport",
    "Trace",
    "TraceError",
    "TraceEvent",
    "TraceStats",
    "load",
    "load_with_report",
]
