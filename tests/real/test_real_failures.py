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
        ("3:node1", "expected STEP:WORKER:KIND[:POINT], KIND one of crash|hang|stall|join|netdown|netup|slow"),
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
        ("3:node1/0:slow:0", "a positive whole number of kbit/s"),
        ("3:node1:slow:fast", "a positive whole number of kbit/s"),
        ("2s:node1:netdown:recovery", "only a step-based netdown takes a point"),
        ("2:node1:netup:recovery", "only a step-based netdown takes a point"),
        ("2:node1:netdown:forward", "only a step-based netdown takes a point"),
        ("2:node1:netup", "no earlier entry cuts or slows it"),
        ("2:node1:netdown,4:node1:netdown", "already cut (entry 1)"),
        ("2:node1:netdown,4s:node1:netup", "both use steps or both use times"),
        ("2:node1:netdown:recovery,4:node1:netup", "a cut at a recovery has no known time"),
    ],
)
def test_bad_schedules_name_the_entry_and_the_problem(text, message):
    with pytest.raises(InjectionError, match=re.escape(message)):
        parse_injections(text, NODES)


def test_link_faults_parse_with_their_rate_and_point_and_are_nobodys_own():
    """netdown/netup/slow name the whole node, a slow its rate (default 1000 kbit/s), a
    step-based netdown may come at a recovery; none is carried out by the worker, and a
    link fault does not count as the node being down (a crash may follow a slow)."""
    items = parse_injections("1:node2:slow:800,3:node2:netup,4:node3:netdown:recovery,2s:node1:slow,5s:node1:netdown,"
                             "7s:node1:netup,6:node2:crash", NODES)  # fmt: skip
    assert [(i.kind, i.node, i.step, i.at_s, i.rate_kbit, i.network, i.by_worker) for i in items] == [
        ("slow", "node2", 1, None, 800, True, False),
        ("netup", "node2", 3, None, None, True, False),
        ("netdown", "node3", 4, None, None, True, False),
        ("slow", "node1", None, 2.0, 1000, True, False),
        ("netdown", "node1", None, 5.0, None, True, False),
        ("netup", "node1", None, 7.0, None, True, False),
        ("crash", "node2", 6, None, None, False, True),
    ]
    assert items[2].point == "recovery" and items[2].describe() == "netdown node3 step 4 at recovery"
    assert items[0].describe() == "slow node2 step 1 to 800 kbit/s"
    assert parse_injections("1:node2:slow:800", NODES)[0].to_dict()["rate_kbit"] == 800


def test_a_local_run_refuses_link_faults_in_one_line(capsys):
    """A job on one machine's network cannot have a link cut: exit 2, one line naming
    the entry and where link faults do work."""
    code = main(["run", "--nodes", "2", "--steps", "2", "--inject", "1:node1:netdown", "--out", "/nonexistent/x"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "entry 1 (netdown node1 step 1)" in err[0] and "ooblab netns" in err[0]


def test_link_requests_round_trip_through_the_control_file(tmp_path):
    """The coordinator appends; the owner of the links reads whole lines only, from
    where it stopped."""
    from real.control.links import LinkRequests, read_requests

    path = tmp_path / "net-control"
    assert read_requests(path, 0) == ([], 0)
    links = LinkRequests(path)
    first = links.hand_over("slow", "node2", 800, "--inject slow node2 step 1 to 800 kbit/s")
    got, offset = read_requests(path, 0)
    assert got == [first] and offset == path.stat().st_size
    with open(path, "a") as f:
        f.write('{"kind": "netdown"')  # a line being written
    assert read_requests(path, offset) == ([], offset)
    with open(path, "a") as f:
        f.write(', "node": "node3", "rate_kbit": null, "t_wall": 1.5}\n')
    (second,), _ = read_requests(path, offset)
    assert (second.kind, second.node, second.rate_kbit, second.t_wall) == ("netdown", "node3", None, 1.5)


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


class _Events:
    def __init__(self):
        self.events: list[tuple[str, dict]] = []

    def event(self, kind, **detail):
        self.events.append((kind, detail))


def test_the_schedule_hands_link_faults_over_at_their_step_time_or_recovery(tmp_path):
    """Step-based link faults go out once that many steps are committed, a netdown at
    `recovery` only when a recovery begins at or after its step, timed ones at their time;
    a cut counts as a failure (its time starts the recovery's clock)."""
    from real.control.links import LinkRequests, read_requests
    from real.control.schedule import EventSchedule

    items = parse_injections("1:node2:slow:800,3:node2:netup,4:node3:netdown:recovery,2s:node1:netdown", NODES)
    path = tmp_path / "net-control"
    events = _Events()
    schedule = EventSchedule(None, items, None, events, 1, None, LinkRequests(path))

    def sent() -> list[tuple[str, str]]:
        return [(r.kind, r.node) for r in read_requests(path, 0)[0]]

    schedule.at_step(0)
    schedule.at_recovery(3)
    assert sent() == []
    schedule.at_step(1)
    assert sent() == [("slow", "node2")]
    schedule.start(100.0)
    schedule.due(101.9)
    schedule.at_step(3)
    assert sent() == [("slow", "node2"), ("netup", "node2")]
    schedule.due(102.0)
    schedule.at_recovery(5)
    assert sent()[2:] == [("netdown", "node1"), ("netdown", "node3")]
    assert len(schedule.take_failure_times()) == 2
    assert [d["applied"] for _, d in events.events] == [True] * 4


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--nodes", "2", "--", "--steps", "2", "--inject", "1:node7:netdown"], "unknown worker 'node7'"),
        (["--nodes", "2", "--", "--nodes", "3"], "give --nodes before the job's arguments"),
        (["--nodes", "0", "--", "--steps", "2"], "--nodes must be at least 1"),
        (["--", "--steps", "x"], "invalid int value: 'x'"),
    ],
)
def test_ooblab_netns_checks_the_job_before_making_any_host(argv, message, capsys):
    """Bad job arguments are refused in one line (exit 2) before a namespace is made."""
    try:
        code = main(["netns", *argv])
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0], err


def test_a_trace_removal_crashes_or_isolates_the_node_by_its_cause():
    """A removal caused by a network fault or a hang (cable, switch, software) stops the
    node's processes (alive, silent: noticed at the heartbeat timeout, as the simulator
    prices it); one by a crash (gpu, host) or with no cause kills them; an add joins."""
    from real.control.schedule import EventSchedule
    from traces.model import TraceEvent

    events = [TraceEvent(0, "add", n) for n in ("a", "b", "c", "d", "e")]
    causes = {"a": "cable", "b": "switch", "c": "software", "d": "gpu", "e": None}
    events += [TraceEvent(1 + i, "remove", n, causes[n]) for i, n in enumerate("abcde")]
    events.append(TraceEvent(9, "add", "a"))
    schedule = schedule_from_trace(Trace(tuple(events), "t"), 1.0, 5)
    timed = EventSchedule(schedule, (), None, _Events(), 1, None).timed
    assert [(t.node, t.kind) for t in timed] == [
        ("a", "isolate"), ("b", "isolate"), ("c", "isolate"), ("d", "crash"), ("e", "crash"), ("a", "join")
    ]  # fmt: skip
    assert "(cable)" in timed[0].label
