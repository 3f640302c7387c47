"""What a calibration measured (`calibrate`), as the simulator's pause options and a cost
profile: `Overheads`, and the share of a restart its start-up took.

The figures and how each is measured are in `calibrate`'s docstring; here is the record, the
options it gives the simulator's runs (`sim_options`, `core_options`) and the cost profile
(`cost_profile`) a simulation can name. The byte-proportional parts of the simulator's
restart and checkpoint model are switched off (`UNLIMITED_GB_PER_S`): the measured constants
hold the whole cost for this model, as it moves the same bytes every time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from .core_cost import core_line, measured_core_costs, sweep_points
from .notice import pause_apart

UNLIMITED_GB_PER_S = 1e6
# details: the core-seconds a sample cost each calibration job, "all" over both jobs'
# iterations (the simulator's), and the "cores" they were measured on (`core_cost`)
CORE_COST_KEY = "sample_core_s"
# details: the core sweep's jobs (`calibrate.with_core_sweep`): worker count -> run directory
CORE_SWEEP_KEY = "core_sweep"


@dataclass(frozen=True)
class Overheads:
    reconfigure_overhead_s: float
    restart_overhead_s: float
    checkpoint_fixed_s: float
    node_startup_s: float
    details: Mapping[str, Any]  # what each figure was computed from
    # the restart measured (`restart_overhead_s`) started this many processes; each one
    # more or fewer costs `restart_per_process_s` (0 and 0: calibrations cached before
    # the slope was measured, a constant restart)
    restart_processes: int = 0
    restart_per_process_s: float = 0.0
    # the share of a restart until its processes have all started (0: calibrations cached
    # before it was measured, a restart that any removal cuts short)
    restart_startup_share: float = 0.0
    # what a pipeline send costs more per the plan's processes (`loaded_hops`; 0, 0 and 0:
    # calibrations cached before it was measured, the profile's hop alone; a slope per
    # sends a second: one cached on the evening of 2026-12-03, measured again when asked)
    loaded_hop_fixed_s: float = 0.0
    loaded_hop_slope_s2: float = 0.0
    loaded_hop_per_process_s: float = 0.0
    # the cores the emulated nodes' processes share (`sim.startup_pool`): the machine
    # that runs the trace runs, set by the validation (0: each start-up on its own)
    startup_cores: float = 0.0
    # `reconfigure_overhead_s` leaves out the survivors' wait to notice the loss, which the
    # simulator then charges as its mean over the iteration (`sim.notice`; False:
    # calibrations cached before it was measured apart, the wait in the pause)
    sync_notice: bool = False

    @property
    def restart_fixed_s(self) -> float:
        """The relaunch line's intercept through the measured restart (never below 0)."""
        return max(0.0, self.restart_overhead_s - self.restart_per_process_s * self.restart_processes)

    def relaunch_s(self, processes: int) -> float:
        """What the simulator charges a relaunch of `processes` (`sim.cost_terms.relaunch_s`)."""
        from sim.cost_terms import relaunch_s

        return relaunch_s(self.restart_fixed_s, self.restart_per_process_s, processes)

    def sim_options(self, loaded_sends: bool = False) -> dict[str, Any]:
        """The simulator's pause options (the same for every policy), with the loaded
        sends' constants where asked (`loaded_hops`)."""
        loaded = {
            "loaded_hop_fixed_s": self.loaded_hop_fixed_s,
            "loaded_hop_slope_s2": self.loaded_hop_slope_s2,
            "loaded_hop_per_process_s": self.loaded_hop_per_process_s,
        }
        return {
            "reconfigure_overhead_s": self.reconfigure_overhead_s,
            "restart_fixed_s": self.restart_fixed_s,
            "restart_per_process_s": self.restart_per_process_s,
            "restart_startup_share": self.restart_startup_share,
            "checkpoint_fixed_s": self.checkpoint_fixed_s,
            "restart_load_gb_per_s": UNLIMITED_GB_PER_S,
            "storage_gb_per_s": UNLIMITED_GB_PER_S,
            "node_startup_s": self.node_startup_s,
            **({"startup_cores": self.startup_cores} if self.startup_cores else {}),
            **({"sync_notice": True} if self.sync_notice else {}),
            **(loaded if loaded_sends else {}),
        }

    def cost_profile(self, where: str, *, loaded_sends: bool = False, real_compute: bool = False):
        """What this calibration fitted, as a cost profile (`sim.cost_profiles`) a
        simulation can name: the options `sim_options` and (real compute) `core_options`
        give the validation's own runs, each sourced to this calibration on `where`."""
        from sim.cost_profiles import from_values

        values = {**self.sim_options(loaded_sends), **(self.core_options() if real_compute else {})}
        fitted = f"fitted by ooblab validate on {where} (overheads.json beside this file)"
        unlimited = "assumed: unlimited, the emulated nodes keep their checkpoints on this host"
        return from_values(
            f"validated-{where}",
            f"the pauses and testbed terms ooblab validate measured on {where}",
            values,
            {"*": fitted, "restart_load_gb_per_s": unlimited, "storage_gb_per_s": unlimited},
        )

    def noticed_apart(self) -> Overheads:
        """These overheads with the reconfiguration pause less the survivors' measured
        wait to notice each loss (`notice.pause_apart`) and `sync_notice` set; as they are
        where that is already so or cannot be measured."""
        if self.sync_notice:
            return self
        apart = pause_apart(self.details.get("oobleck") or {})
        if apart is None:
            return self
        pause, notices = apart
        details = {**self.details, "oobleck": {**self.details["oobleck"], "notices_s": notices}}
        return replace(self, reconfigure_overhead_s=pause, sync_notice=True, details=details)

    def with_startup_share(self) -> Overheads:
        """These overheads with the start-up share worked out from their Varuna details
        (`median_startup_share`), as a fresh calibration does; as they are where the
        details cannot say (a calibration cached before they were kept)."""
        share = median_startup_share(self.details.get("varuna") or {})
        return self if share is None else replace(self, restart_startup_share=share)

    def with_core_costs(self, samples_per_iteration: int) -> Overheads:
        """These overheads with the core-seconds a sample cost each calibration job
        (`core_cost.measured_core_costs`, in `details`), read from the jobs' summaries
        where a calibration cached before them lacks them; as they are otherwise."""
        known = self.details.get(CORE_COST_KEY) or {}
        if "all" in known and ("by_workers" in known or CORE_SWEEP_KEY not in self.details):
            return self
        costs = measured_core_costs(self.details, samples_per_iteration)
        points = sweep_points(self.details.get(CORE_SWEEP_KEY) or {}, samples_per_iteration)
        if points and "all" in costs:
            costs["by_workers"] = {str(w): c for w, c in sorted(points.items())}
        return replace(self, details={**self.details, CORE_COST_KEY: costs})

    def core_options(self) -> dict[str, Any]:
        """The simulator's throughput ceiling (`sim.core_bound`): where a core sweep
        measured two worker counts or more, the line through them (`core_cost.core_line`);
        else the core-seconds a sample cost the calibration jobs
        (`core_cost.measured_core_costs`, both jobs' iterations), on any count; with the
        cores they were measured on; empty where not measured."""
        costs = self.details.get(CORE_COST_KEY) or {}
        if "all" not in costs or not costs.get("cores"):
            return {}
        options = {"compute_cores": float(costs["cores"]), "sample_core_s": float(costs["all"])}
        line = core_line({int(w): float(c) for w, c in (costs.get("by_workers") or {}).items()})
        if line is not None:
            options.update(sample_core_s=line[0], sample_core_per_worker_s=line[1])
        return options

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Overheads:
        return cls(**dict(data))


STARTUP_PHASES = ("detection_s", "rebuild_s", "planning_s", "respawn_s")  # failure .. every process started


def median_startup_share(varuna: Mapping[str, Any]) -> float | None:
    """The start-up share of the Varuna calibration's median restart (`details["varuna"]`:
    its `recovery`, among `recoveries`, and each one's measured pause, `restarts_s`), over
    that restart's own pause; None where the details lack them."""
    rec, recoveries, measured = varuna.get("recovery"), varuna.get("recoveries"), varuna.get("restarts_s")
    if not rec or not recoveries or not measured or len(recoveries) != len(measured) or rec not in recoveries:
        return None
    return startup_share(rec, float(measured[recoveries.index(rec)]))


def startup_share(recovery: Mapping[str, Any], restart_s: float) -> float:
    """The share of a restart's pause (`restart_s`) that passed before its processes had
    all started: its phases up to the respawn's end, in [0, 1] (0 without a pause)."""
    if restart_s <= 0:
        return 0.0
    started = sum(float(recovery.get(name) or 0.0) for name in STARTUP_PHASES)
    return min(1.0, max(0.0, started / restart_s))
