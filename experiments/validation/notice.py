"""The calibration's reconfiguration pause without the survivors' wait to notice the loss.

A survivor that computes when a node dies stops only at its next communication
(`sim.notice`), so each calibration recovery's pause holds a wait that depends on where in
its iteration the kill fell: on the 8-node setting 0.42-0.61 s for the calibration's kills
against 0.18-0.22 s for a trace's removals, at 0.51-0.98 s iterations. Taken apart, the
pause is what a reconfiguration costs wherever the failure falls, and the simulator
charges the wait itself, as its mean over the iteration (`sync_notice`).

The wait measured, per recovery: the coordinator's detection plus the latest survivor's
fault after it (`fault` events, `after_s`, of the ranks that reported within the
recovery); a recovery with no fault timed counts no wait.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from planner.records import read_events


def measured_notices_s(events: Iterable[Mapping[str, Any]], recoveries: Sequence[Mapping[str, Any]]) -> list[float]:
    """Per recovery (a real run's summary records: `t_fail_s`, `t_done_s`,
    `detection_s`), the seconds from its failure until the last survivor had stopped."""
    faults = [
        (float(e["time_s"]), float(e["after_s"]))
        for e in events
        if e.get("kind") == "fault" and e.get("after_s") is not None
    ]
    out = []
    for rec in recoveries:
        inside = [after for t, after in faults if rec["t_fail_s"] <= t <= rec["t_done_s"]]
        out.append(float(rec.get("detection_s") or 0.0) + max(inside) if inside else 0.0)
    return out


def pause_apart(oobleck: Mapping[str, Any]) -> tuple[float, list[float]] | None:
    """(the median pause less its wait, the waits) from the Oobleck calibration's details
    (`reconfigure_overheads_s`, `recoveries`, and `notices_s` or the run's events under
    `run_dir`); None where they are missing (a calibration whose run directory is gone)."""
    pauses, recoveries = oobleck.get("reconfigure_overheads_s"), oobleck.get("recoveries")
    if not pauses or not recoveries or len(pauses) != len(recoveries):
        return None
    notices = oobleck.get("notices_s")
    if notices is None:
        run_dir = Path(str(oobleck.get("run_dir", "")))
        if not (run_dir / "events.jsonl").is_file():
            return None
        notices = measured_notices_s(read_events(run_dir), recoveries)
    return max(0.0, statistics.median(p - n for p, n in zip(pauses, notices))), list(notices)
