"""Where a recovery's time goes: from the failure to the next completed iteration.

A `Recovery` starts at the failure (the victim's own timestamp for an injected failure,
the kill for a coordinator-driven one, else its detection) and ends when the iteration
the failure interrupted has been completed again. The coordinator marks each phase as it
enters it, so the phases always add up to the total, also when a second failure strikes
in the middle (its time goes to the phase it interrupted):

- `detection`: failure -> the coordinator knows (exit status, heartbeat deadline, faults);
- `rebuild`: survivors unwinding (error cascade, teardown, reports) and, once the new
  generation is published, joining its process groups;
- `planning`: the policy's decision, the layout, the layer sources;
- `checkpoint`: writing the survivors' state (Varuna's "checkpoint if possible");
- `respawn`: stopping processes and starting fresh ones (restarts; replacements);
- `copy`: layer state moving in (from peers, or loaded from a checkpoint);
- `redo`: the first iteration(s) again, up to the one that was interrupted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PHASES = ("detection", "rebuild", "planning", "checkpoint", "respawn", "copy", "redo")
LIVE, RESTART = "live", "restart"


@dataclass
class Recovery:
    """One recovery (times in seconds since the coordinator started)."""

    index: int
    t_fail_s: float
    nodes: list[str] = field(default_factory=list)
    kind: str = LIVE
    failures: int = 1
    until_step: int | None = None  # done when this step commits
    t_done_s: float | None = None
    phases: dict[str, float] = field(default_factory=lambda: {p: 0.0 for p in PHASES})
    _phase: str = "detection"
    _mark_s: float = 0.0

    def __post_init__(self) -> None:
        self._mark_s = self.t_fail_s

    def enter(self, phase: str, t_s: float) -> None:
        """Close the current phase at `t_s` (never before its start) and open `phase`."""
        if phase not in PHASES:
            raise ValueError(f"unknown recovery phase {phase!r}")
        t_s = max(t_s, self._mark_s)
        self.phases[self._phase] += t_s - self._mark_s
        self._phase, self._mark_s = phase, t_s

    def finish(self, t_s: float) -> None:
        self.enter("redo", t_s) if self._phase == "redo" else self.enter(self._phase, t_s)
        self.t_done_s = max(t_s, self._mark_s)

    @property
    def done(self) -> bool:
        return self.t_done_s is not None

    @property
    def total_s(self) -> float:
        return (self.t_done_s if self.t_done_s is not None else self._mark_s) - self.t_fail_s

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "kind": self.kind,
            "nodes": list(self.nodes),
            "failures": self.failures,
            "t_fail_s": self.t_fail_s,
            "t_done_s": self.t_done_s,
            "total_s": self.total_s,
            **{f"{p}_s": v for p, v in self.phases.items()},
        }
