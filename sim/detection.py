"""How long a failure takes to be noticed, by its cause (planner calibration).

Until a failure detector declares a loss, the survivors wait at their next collective;
the recovery the design chooses starts only then. A trace's removal may name its cause
(`datacenter:` traces name the failed component); each cause belongs to a kind, and a cost
profile (`sim.cost_profiles`) prices the kinds: a crash is reported by the process's exit
or a missed heartbeat, a network fault by link checks, a hang only by the collective's
timeout. A removal with no cause (a preemption) takes `default_s`. All default to 0, the
instant detection the simulator had before these prices. A design with a detector of its own
(replica groups' quorum timeout, a `Detect` action) pays whichever declares the loss first:
its own price or the profile's for the kind (torchft's 60 s timeout beats a hang's 10-minute
collective timeout); where the profile prices no detection at all, its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traces.model import CAUSE_KIND

from .cost_terms import term

# a failure's kind (`traces.model.CAUSE_KIND`; "no_cause" for none) -> the cost term pricing it
KIND_TERMS = (("crash", "detect_crash_s"), ("network", "detect_network_s"), ("hang", "detect_hang_s"),
              ("no_cause", "detect_s"))  # fmt: skip


@dataclass(frozen=True)
class Detection:
    default_s: float = 0.0  # a removal with no cause (traces refuse a cause of no known kind)
    crash_s: float = 0.0
    network_s: float = 0.0
    hang_s: float = 0.0

    @classmethod
    def of(cls, costs: Any) -> Detection:
        """The detection a run's costs price (`CostConfig`'s `detect_*` fields, unset ones 0)."""
        priced = {kind: term(costs, key) for kind, key in KIND_TERMS}
        return cls(priced["no_cause"], priced["crash"], priced["network"], priced["hang"])

    def seconds(self, cause: str | None) -> float:
        kind = CAUSE_KIND.get(cause or "")
        return self.default_s if kind is None else getattr(self, f"{kind}_s")

    @property
    def free(self) -> bool:
        return not (self.default_s or self.crash_s or self.network_s or self.hang_s)
