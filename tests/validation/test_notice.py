"""The calibration's pause less the survivors' wait to notice a loss
(`experiments.validation.notice`, `Overheads.noticed_apart`)."""

from __future__ import annotations

import json
import statistics

import pytest

from experiments.validation.notice import measured_notices_s, pause_apart
from experiments.validation.overheads import Overheads

RECOVERIES = [
    {"t_fail_s": 22.0, "t_done_s": 23.3, "detection_s": 0.016},
    {"t_fail_s": 34.0, "t_done_s": 35.4, "detection_s": 0.011},
    {"t_fail_s": 46.0, "t_done_s": 47.7, "detection_s": 0.02},
]
EVENTS = [
    {"kind": "fault", "time_s": 22.5, "after_s": 0.41},
    {"kind": "fault", "time_s": 22.5, "after_s": 0.43},
    {"kind": "fault", "time_s": 22.6, "after_s": None},  # a rank that reported no fault time
    {"kind": "worker_unclean", "time_s": 22.6, "after_s": 6.0},  # not a fault
    {"kind": "fault", "time_s": 30.0, "after_s": 5.0},  # between recoveries: no one's
    {"kind": "fault", "time_s": 34.3, "after_s": 0.27},
    {"kind": "fault", "time_s": 34.6, "after_s": 0.52},
]


def overheads(details_oobleck, pause_s=0.6) -> Overheads:
    return Overheads(
        reconfigure_overhead_s=pause_s,
        restart_overhead_s=10.0,
        checkpoint_fixed_s=0.0,
        node_startup_s=2.0,
        details={"oobleck": details_oobleck},
    )


def test_the_wait_is_detection_and_the_last_fault_inside_each_recovery():
    assert measured_notices_s(EVENTS, RECOVERIES) == pytest.approx([0.016 + 0.43, 0.011 + 0.52, 0.0])


def test_the_pause_apart_is_the_median_of_each_pause_less_its_own_wait(tmp_path):
    pauses = [0.57, 0.67, 0.73]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    got = pause_apart({"reconfigure_overheads_s": pauses, "recoveries": RECOVERIES, "run_dir": str(tmp_path)})
    assert got is not None
    waits = [0.446, 0.531, 0.0]
    assert got[1] == pytest.approx(waits)
    assert got[0] == pytest.approx(statistics.median(p - w for p, w in zip(pauses, waits)))
    assert got[0] != pytest.approx(statistics.median(pauses) - statistics.median(waits))  # per recovery, not medians


def test_noticed_apart_turns_the_simulated_wait_on_once(tmp_path):
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    old = overheads({"reconfigure_overheads_s": [0.57, 0.67, 0.73], "recoveries": RECOVERIES, "run_dir": str(tmp_path)})
    assert not old.sync_notice and "sync_notice" not in old.sim_options()
    new = old.noticed_apart()
    assert new.sync_notice and new.sim_options()["sync_notice"] is True
    assert new.reconfigure_overhead_s == pytest.approx(0.139)  # median of 0.124, 0.139, 0.73
    assert new.details["oobleck"]["notices_s"] == pytest.approx([0.446, 0.531, 0.0])
    assert new.noticed_apart() is new  # the wait is taken out once
    again = Overheads.from_dict(json.loads(json.dumps(new.to_dict())))  # as cached, without the events
    (tmp_path / "events.jsonl").unlink()
    assert again.noticed_apart().reconfigure_overhead_s == pytest.approx(0.139)


def test_a_calibration_whose_events_are_gone_keeps_the_wait_in_its_pause(tmp_path):
    old = overheads({"reconfigure_overheads_s": [0.6], "recoveries": RECOVERIES[:1], "run_dir": str(tmp_path / "gone")})
    assert old.noticed_apart() is old
    assert overheads({}).noticed_apart().sync_notice is False
