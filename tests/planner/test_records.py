"""The shared run record round-trips and stays standard JSON."""

from __future__ import annotations

import json

from planner.records import (
    EventRecord,
    RunSummary,
    TimeBreakdown,
    TimelineRow,
    read_events,
    read_timeline,
    upgrade_summary,
    write_run,
)


def test_run_record_round_trip(tmp_path):
    rows = [
        TimelineRow(0.0, 4, 0, "waiting", 0, 0, 0.0, 0.0),
        TimelineRow(45.0, 4, 4, "running", 0, 0, 12.5, 0.05),
        TimelineRow(125.0, 4, 4, "running", 10, 1000, 12.5, 0.14),
    ]
    summary = RunSummary(
        "oobleck",
        "gpt3-1.3b",
        "fixed",
        "planner",
        125.0,
        12.5,
        1000,
        10,
        0,
        0,
        0,
        0,
        0.14,
        0.13,
        TimeBreakdown(useful_compute_s=80.0, waiting_s=45.0),
        extra={"losses": [1.0, 0.5], "recovery_s": [float("inf")]},
    )
    out = write_run(
        tmp_path / "run", {"policy": "oobleck", "seed": 1}, summary, rows, [EventRecord(0.0, "add", {"node": "n0"})]
    )
    assert read_timeline(out) == rows
    data = json.loads((out / "summary.json").read_text())
    assert data["breakdown"]["useful_compute_s"] == 80.0
    assert data["losses"] == [1.0, 0.5] and data["recovery_s"] == ["inf"]
    assert summary.breakdown.total_s() == 125.0
    assert json.loads((out / "events.jsonl").read_text().splitlines()[0]) == {
        "time_s": 0.0,
        "kind": "add",
        "node": "n0",
    }
    assert read_events(out) == [{"time_s": 0.0, "kind": "add", "node": "n0"}]


def test_the_summary_says_its_units_and_old_files_are_read_in_todays_keys(tmp_path):
    summary = RunSummary(
        "oobleck", "m", "t", "planner", 100.0, 1.0, 10, 1, 0, 0, 0, 0, 0.1, 0.0,
        TimeBreakdown(useful_compute_s=98.0, waiting_s=2.0), idle_gpu_s=7200.0,
    )  # fmt: skip
    data = json.loads((write_run(tmp_path / "r", {}, summary, [], []) / "summary.json").read_text())
    assert "idle_gpu_s" not in data["breakdown"] and data["idle_gpu_s"] == 7200.0
    assert data["effective_training_time"] == 0.98
    # a summary written before: GPU-seconds inside the wall-clock breakdown, no ratio
    old = {**data, "breakdown": {**data["breakdown"], "idle_gpu_s": 7200.0}}
    del old["idle_gpu_s"], old["effective_training_time"]
    assert upgrade_summary(old) == data
