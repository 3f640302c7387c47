"""Failure schedules and traces: parsing, checks, and clear errors (no processes)."""

from __future__ import annotations

import re
import signal

import pytest

from ooblab.cli import main
from real.control.trace_replay import TraceScheduleError, schedule_from_trace
from real.protocol.failures import InjectionError, parse_injections
from traces.model import Trace

NODES = [f"node{i}" for i in range(4)]


def test_a_schedule_parses_steps_times_workers_kinds_and_points():
    items = parse_injections(
        "3:node1:crash, 2.5s:node0:hang,6:node1:join,4:node2/1:hang:allreduce", NODES, gpus_per_node=2
    )
    assert [(i.index, i.kind, i.node, i.gpu, i.step, i.at_s, i.point) for i in items] == [
        (0, "crash", "node1", 0, 3, None, "forward"),
        (1, "hang", "node0", 0, None, 2.5, "forward"),
        (2, "join", "node1", 0, 6, None, "forward"),
        (3, "hang", "node2", 1, 4, None, "allreduce"),
    ]
    assert [i.by_worker for i in items] == [True, False, False, True]
    assert parse_injections("", NODES) == () and parse_injections(None, NODES) == ()


@pytest.mark.parametrize(
    "text, message",
    [
        ("3:node1", "expected STEP:WORKER:crash|hang|stall|join[:POINT]"),
        ("2s:node1:stall", "a stall is step-based"),
        ("3:node1:crash:forward:x", "expected STEP:WORKER"),
        ("x:node1:crash", "neither a step"),
        ("-1:node1:crash", "neither a step"),
        ("3:node9:crash", "unknown worker 'node9'"),
        ("3:node1/1:crash", "has GPUs 0..0"),
        ("3:node1:explode", "unknown kind 'explode'"),
        ("3:node1:crash:sideways", "unknown point 'sideways'"),
        ("1.5s:node1:crash:backward", "a point applies to step-based"),
        ("3:node1:join", "no earlier entry takes it out"),
        ("3:node1:crash,5:node1:hang", "already down"),
        ("3:node1:crash,5s:node1:join", "both use steps or both use times"),
    ],
)
def test_bad_schedules_name_the_entry_and_the_problem(text, message):
    with pytest.raises(InjectionError, match=re.escape(message)):
        parse_injections(text, NODES)


def test_a_join_may_follow_its_failure_and_the_node_may_fail_again():
    items = parse_injections("2:node3:crash,4:node3:join,6:node3:hang", NODES)
    assert [i.kind for i in items] == ["crash", "join", "hang"]


def test_a_trace_becomes_initial_nodes_and_later_events_compressed():
    trace = Trace.from_tuples(
        [(0, "add", "a"), (0, "add", "b"), (0, "add", "c"), (60, "remove", "b"), (120, "add", "d"), (180, "add", "b")]
    )
    schedule = schedule_from_trace(trace, time_scale=60, capacity=4)
    assert schedule.initial == ("a", "b", "c") and schedule.max_live == 4
    assert [(e.time_s, e.kind, e.node) for e in schedule.events] == [
        (1.0, "remove", "b"),
        (2.0, "add", "d"),
        (3.0, "add", "b"),
    ]


def test_a_trace_with_more_live_nodes_than_workers_is_refused():
    trace = Trace.from_tuples([(0, "add", "a"), (0, "add", "b"), (5, "add", "c")])
    with pytest.raises(TraceScheduleError, match="up to 3 live nodes at once, more than the job's 2"):
        schedule_from_trace(trace, 1.0, capacity=2)
    with pytest.raises(TraceScheduleError, match="no node at time 0"):
        schedule_from_trace(Trace.from_tuples([(5, "add", "a")]), 1.0, capacity=2)
    with pytest.raises(TraceScheduleError, match="compression factor"):
        schedule_from_trace(trace, 0.0, capacity=3)


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--nodes", "2", "--inject", "3:node1"], "expected STEP:WORKER"),
        (["run", "--nodes", "2", "--inject", "3:node7:crash"], "unknown worker 'node7'"),
        (["run", "--nodes", "2", "--inject", "3:node1:crash:sideways"], "unknown point"),
        (["run", "--nodes", "2", "--trace", "TRACE3"], "up to 3 live nodes at once, more than the job's 2"),
        (["run", "--nodes", "2", "--trace", "no/such/trace.csv"], "--trace"),
        (["run", "--nodes", "2", "--policy", "bamboo"], "design bamboo does not run on the real backend; designs that"),
        (["run", "--nodes", "2", "--checkpoint-every", "-1"], "checkpoint_every must be"),
        (["run", "--nodes", "2", "--policy", "varuna", "--pipelines", "1,1"], "--pipelines forces Oobleck's grouping"),
    ],
)
def test_bad_failure_requests_exit_2_with_a_reason(args, message, capsys, tmp_path):
    """Checked before any worker starts (in-process; the SIGTERM handler is put back)."""
    if "TRACE3" in args:
        trace = tmp_path / "three.csv"
        trace.write_text("0,add,x\n0,add,y\n0,add,z\n")
        args = [str(trace) if a == "TRACE3" else a for a in args]
    previous = signal.getsignal(signal.SIGTERM)
    try:
        code = None
        try:
            code = main([*args, "--out", str(tmp_path / "run")])
        except SystemExit as exc:  # argparse
            code = exc.code
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert code == 2
    err = capsys.readouterr().err
    assert message in err
