"""traces: the canonical trace model, loaders for real trace formats, transformations,
calibrated generators, and the ``ooblab traces`` command.

Start with `load` (any supported file), `from_spec` (a file or a generator spec) and
`Trace` (the canonical form). Fitting (`traces.spot_fit`, scipy) and plotting
(`traces.plot`, matplotlib) are imported only where used.
"""

from .datacenter import DatacenterRun, datacenter, datacenter_failures
from .datacenter_profiles import DATACENTER_PROFILES, DatacenterProfile
from .errors import TraceError
from .events_csv import save_events_csv, write_events_csv
from .generators import fixed_interval, parse_duration_s, round_interval_to_hours
from .load import DEFAULT_SEED, FORMATS, load, load_with_report
from .model import Trace, TraceEvent
from .rows import LoadReport
from .spec import from_spec, generate
from .spot import spot_market
from .spot_profiles import SPOT_PROFILES, SpotProfile
from .stats import TraceStats
from .transform import cap, compress, rescale, window

__all__ = [
    "DATACENTER_PROFILES",
    "DEFAULT_SEED",
    "DatacenterProfile",
    "DatacenterRun",
    "FORMATS",
    "LoadReport",
    "SPOT_PROFILES",
    "SpotProfile",
    "Trace",
    "TraceError",
    "TraceEvent",
    "TraceStats",
    "cap",
    "compress",
    "datacenter",
    "datacenter_failures",
    "fixed_interval",
    "from_spec",
    "generate",
    "load",
    "load_with_report",
    "parse_duration_s",
    "rescale",
    "round_interval_to_hours",
    "save_events_csv",
    "spot_market",
    "window",
    "write_events_csv",
]
