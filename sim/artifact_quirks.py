"""The ten ways the published artifact's code departs from the model it states.

`--calibration artifact` is the stated model (`../shared/calibration/README.md`, top
half); `--calibration artifact-as-run` is the artifact's code as it ran, every switch
below on, replayed by `sim.artifact_replay`. Each switch can be turned off on its own
(`artifact_quirks` in the config: `all`, `none`, or names, a leading `-` turning one off
from all), so a figure's dependence on each behaviour can be measured.

The artifact: SymbioticLab/Oobleck, branch sosp23-artifact, commit 7966556,
tools/simulator/{oobleck,varuna,bamboo}_simulator.py, driven by eval_tput_vs_freq.py and
eval_gcp_ec2.py. Function names below are the artifact's.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from . import artifact_data as art
from .errors import SimError


@dataclass(frozen=True)
class ArtifactQuirks:
    """One boolean per behaviour; True = as the artifact's code does it."""

    stale_timeouts: bool = False
    """All three systems. Every rendezvous start (each removal, each start from a stop)
    queues its own timeout (`simulate_rendezvous_start`, `create_global_rendezvous_timeout_event`);
    none is ever cancelled. The first to fire completes the rendezvous and empties its
    list; each later one finds the list empty, forms zero pipelines and leaves the job
    STOPPED (`simulate_rendezvous_timeout`) until the next ready or removal. Off: a new
    rendezvous start supersedes the pending timeout (the pause restarts from the removal)."""

    train_through_pause: bool = False
    """All three. The version that invalidates in-flight steps is bumped when the
    rendezvous completes, not at the removal (`simulate_rendezvous_timeout`,
    `simulate_training_step_complete`), so steps of the old chain keep completing (and
    Varuna keeps checkpointing) through the pause. Off: the removal ends the step in
    flight."""

    varuna_checkpoint_scan: bool = False
    """Varuna. `checkpointing_will_fail` scans the event heap's array in storage order for a
    removal before the first checkpoint-complete event (pushed at the step's end plus twice
    the checkpoint time); on failure the step counter drops by 10 and the last 10 throughput
    points are zeroed, whatever happened since. Off: a checkpoint fails when a removal
    arrives while it is written, and the rollback goes to the previous one."""

    varuna_counter_keeps_rolled_back: bool = False
    """Varuna. "Every 10 iterations" counts on `num_steps_complete`, which a removal's
    rollback does not reset (`simulate_spot_instance_remove`). Off: the counter returns to
    the last checkpoint's value."""

    bamboo_slow_on_any_removal: bool = False
    """Bamboo. Any removal while running, of a spare or a node still starting too, makes
    iterations 1.5x slower until the next reconfiguration
    (`bamboo_simulator.simulate_spot_instance_remove`). Off: only a fail-over slows it."""

    bamboo_heap_order: bool = False
    """Bamboo. Same-time add and ready events pop from the heap in its order, not the
    trace's, and that order decides the coordinates and spares
    (`simulate_assign_coordinates`). Off: ties pop in the order they were pushed."""

    bamboo_stale_waiting: bool = False
    """Bamboo. `num_workers_waiting` is not lowered when a spare leaves, and a removal
    during a reconfiguration restarts it only when the pending timeout fires (from that
    time, `simulate_rendezvous_timeout`). Off: a leaving spare is no longer counted and the
    reconfiguration restarts from the removal."""

    oobleck_zero_rate_runs: bool = False
    """Oobleck, GPT-3-6_7b. At 15 nodes the table's rate is 0: the job "runs" an endless
    iteration (`tput2iter_time_ms` returns 10^12 ms) and ignores new nodes until the next
    removal. Off: it waits, and the next ready node restarts it."""

    varuna_restart_previous_count: bool = False
    """Varuna, BERT-large. The node-count-dependent restart time is set when a rendezvous
    completes (`bertLarge_simulate_step_delta`), so a restart pays the time of the
    configuration that ran before it (76 s before the first). Off: the count it restarts
    with."""

    eval_spot_no_rollback: bool = False
    """Varuna. `eval_gcp_ec2.py` turns rollback off (`no_small_model_fallback=True`) for
    BERT-large, GPT-2-ours and GPT-3-medium on the spot traces; the frequency runs keep it
    on. This is the paper's setting, so it is also the default of `varuna_rollback` in the
    `artifact` calibration (an explicit `varuna_rollback` wins in both)."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def all_on(cls) -> ArtifactQuirks:
        return cls(**dict.fromkeys(cls.names(), True))

    def on(self) -> tuple[str, ...]:
        return tuple(n for n in self.names() if getattr(self, n))

    def any(self) -> bool:
        return any(getattr(self, n) for n in self.names())

    def needs_replay(self) -> bool:
        """True when some switch other than the rollback default is on: those run in
        `sim.artifact_replay`; the stated model runs in `sim.engine`."""
        return any(getattr(self, n) for n in self.names() if n != "eval_spot_no_rollback")

    def without(self, name: str) -> ArtifactQuirks:
        return replace(self, **{name: False})

    @classmethod
    def parse(cls, text: str | None, default: ArtifactQuirks) -> ArtifactQuirks:
        """`all`, `none`, `a,b` (exactly those), `-a,-b` (all but those); None: `default`."""
        if text is None:
            return default
        parts = [p.strip() for p in str(text).split(",") if p.strip()]
        if parts == ["all"]:
            return cls.all_on()
        if parts in (["none"], []):
            return cls()
        negative = [p[1:] for p in parts if p.startswith("-")]
        positive = [p for p in parts if not p.startswith("-")]
        if negative and positive:
            raise SimError(f"artifact_quirks: give names to turn on or -names to turn off, not both ({text!r})")
        unknown = [p for p in negative + positive if p not in cls.names()]
        if unknown:
            raise SimError(f"unknown artifact quirk(s) {', '.join(unknown)}; known: {', '.join(cls.names())}")
        if negative:
            out = cls.all_on()
            for name in negative:
                out = out.without(name)
            return out
        return cls(**dict.fromkeys(positive, True))


STATED = ArtifactQuirks(eval_spot_no_rollback=True)  # `artifact`: the stated model, the paper's settings
AS_RUN = ArtifactQuirks.all_on()


# the spot traces of the paper's Figures 10, 14, 15 (eval_gcp_ec2.py), by the artifact's file names
PAPER_SPOT_TRACES = ("scale_gcp-trace", "scale_p3-trace")
REPLAY_UNSUPPORTED = (
    "checkpoint_every_iterations",
    "reconfigure_cost_factor",
    "restart_cost_factor",
    "checkpoint_cost_factor",
)


REPLAY_UNSUPPORTED_OPTIONS = ("min_nodes", "depth")  # design options the replay cannot vary


def is_paper_spot_trace(trace_name: str) -> bool:
    """True for the artifact's two rescaled spot traces (file stem or path)."""
    stem = trace_name.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".csv")
    return stem in PAPER_SPOT_TRACES


def resolve(config: Any, trace_name: str) -> tuple[ArtifactQuirks, bool, str]:
    """The quirks of an artifact-calibration run, Varuna's rollback and why it is so."""
    default = AS_RUN if config.run.calibration == "artifact-as-run" else STATED
    quirks = ArtifactQuirks.parse(config.run.artifact_quirks, default)
    if quirks.needs_replay():
        given = config.to_dict()
        stray = [name for name in REPLAY_UNSUPPORTED if given[name] is not None]
        stray += [
            f"{config.design.name}'s {name}"
            for name in REPLAY_UNSUPPORTED_OPTIONS
            if config.design.option(name) is not None
        ]
        if stray:
            raise SimError(f"{', '.join(stray)} cannot be set when the artifact's code is replayed (artifact_quirks)")
    small = art.ARTIFACT_MODELS[config.job.model].spot_no_rollback if config.job.model in art.ARTIFACT_MODELS else False
    if config.design.option("rollback") is not None:
        return quirks, config.design.option("rollback"), "given"
    if quirks.eval_spot_no_rollback and small and is_paper_spot_trace(trace_name):
        return quirks, False, "the paper's spot-trace setting for the three smaller models (eval_gcp_ec2.py)"
    return quirks, True, "the artifact's default"
