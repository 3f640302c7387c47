"""A simulated run of a profile directory (the synthetic profile plus whichever side files a
test writes) on the fixed-interval trace: the shared set-up of the tests of the terms that
such files add (`contention.json`, `communication.json`'s hop overhead, `optimizer.json`)."""

from __future__ import annotations

from sim.config import SimConfig


def profile_run_config(directory, nodes: int = 4, removals: int = 1, policy: str = "oobleck") -> SimConfig:
    """Batch 16 of microbatch 1, planner calibration, one removal an hour, one hour past the last."""
    return SimConfig.of(
        policy=policy,
        model=str(directory),
        trace=f"fixed:interval=1h,nodes={nodes},removals={removals}",
        calibration="planner",
        global_batch=16,
        microbatch_size=1,
        duration_s=3600.0 * (removals + 1),
    )
