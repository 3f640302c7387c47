"""Start-ups sharing one host's cores (`sim.startup_pool`, `Pricing(startup_cores=...)`).

The pool against a brute-force time-stepped processor-sharing run (hypothesis), and the
engine by hand on the case of `test_sim_restart_startup`: Varuna on the tiny model, 6
nodes (start-up 45 s), relaunch 40 s whatever its size, half of it start-up (20 s); n6
leaves at 500 s: a 2 s checkpoint, then a restart of n1-n4 from 502 s. On 2 cores its 4
processes get half a core each: 10 core-seconds of start-up each; a joining node's
start-up is 45 core-seconds (alone it has a whole core).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import SimConfig
from sim.engine import Simulation
from sim.errors import SimError
from sim.pricing import Pricing
from sim.startup_pool import StartupPool, rate_per_process, work_for
from sim.timing import PlannerCosts

from .tiny import make_trace, nodes, resumed_at, tiny_varuna


# -- the pool ------------------------------------------------------------------------------
def stepped(jobs, cores: float, dt: float = 1e-3) -> dict[int, float]:
    """Brute force: (arrival_s, processes, seconds_alone) jobs, stepped every dt."""
    left: dict[int, float] = {}
    done: dict[int, float] = {}
    t = 0.0
    while len(done) < len(jobs):
        for i, (at, k, alone) in enumerate(jobs):
            if i not in left and i not in done and at <= t + 1e-12:
                left[i] = work_for(alone, k, cores)
        p = sum(jobs[i][1] for i in left)
        rate = rate_per_process(p, cores)
        t += dt
        for i in list(left):
            left[i] -= rate * dt
            if left[i] <= 1e-12:
                done[i] = t
                del left[i]
    return done


jobs_strategy = st.lists(
    st.tuples(
        st.integers(0, 20).map(float),
        st.integers(1, 6),
        st.integers(1, 12).map(float),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=40, deadline=None)
@given(jobs=jobs_strategy, cores=st.sampled_from([1.0, 2.0, 3.0]))
def test_the_pool_finishes_each_job_when_brute_force_does(jobs, cores):
    pool = StartupPool(cores)
    finished: dict[int, float] = {}
    arrivals = sorted(range(len(jobs)), key=lambda i: jobs[i][0])
    pending = list(arrivals)
    while pending or len(pool):
        next_arrival = jobs[pending[0]][0] if pending else math.inf
        if pool.next_finish() <= next_arrival:
            t = pool.next_finish()
            for key in pool.advance(t):
                finished[key] = t
        else:
            i = pending.pop(0)
            for key in pool.advance(next_arrival):
                finished[key] = next_arrival
            pool.add(i, jobs[i][1], jobs[i][2])
    brute = stepped(jobs, cores)
    for i in range(len(jobs)):
        assert finished[i] == pytest.approx(brute[i], abs=0.02)


@settings(max_examples=40, deadline=None)
@given(jobs=jobs_strategy, cores=st.sampled_from([1.0, 2.0, 4.0]))
def test_finish_s_predicts_what_advance_then_does(jobs, cores):
    pool = StartupPool(cores)
    for i, (_, k, alone) in enumerate(jobs):
        pool.add(i, k, alone)
    predicted = {i: pool.finish_s(i) for i in range(len(jobs))}
    for t in sorted(set(predicted.values())):
        due = {i for i, p in predicted.items() if p == t}
        if t - 1e-6 >= pool.now_s:
            assert not due & set(pool.advance(t - 1e-6))  # not a moment early
        pool.advance(t + 1e-6)
        assert not any(i in pool for i in due)  # and not late


@given(k=st.integers(1, 64), alone=st.floats(0.1, 100), cores=st.sampled_from([1.0, 2.0, 8.0]))
def test_a_job_alone_takes_its_calibrated_time(k, alone, cores):
    pool = StartupPool(cores, now_s=10.0)
    pool.add("x", k, alone)
    assert pool.finish_s("x") == pytest.approx(10.0 + alone)
    assert pool.advance(10.0 + alone + 1e-9) == ["x"]


def test_processes_that_die_give_their_share_back():
    pool = StartupPool(2.0)
    pool.add("restart", 4, 20.0)  # 10 core-seconds each at half a core
    pool.advance(8.0)  # 4 done, 6 left
    pool.shrink("restart", 1)  # 3 processes: two thirds of a core each
    assert pool.finish_s("restart") == pytest.approx(8.0 + 6 / (2 / 3))
    pool.shrink("restart", 3)
    assert "restart" not in pool and pool.next_finish() == math.inf


def test_the_pool_refuses_what_it_cannot_mean():
    with pytest.raises(ValueError, match="cores must be > 0"):
        StartupPool(0)
    pool = StartupPool(2.0, now_s=5.0)
    with pytest.raises(ValueError, match="cannot go back"):
        pool.advance(4.0)
    pool.add("a", 1, 1.0)
    with pytest.raises(ValueError, match="already in the pool"):
        pool.add("a", 1, 1.0)
    with pytest.raises(ValueError, match="processes >= 1"):
        pool.add("b", 0, 1.0)


# -- the engine -----------------------------------------------------------------------------
def run(rows, cores: float | None) -> Simulation:
    policy, timing = tiny_varuna(
        7, PlannerCosts(restart_fixed_s=40.0, restart_per_process_s=0.0, restart_startup_share=0.5)
    )
    trace = make_trace([(0, "add", nodes(6)), *rows, (1500, "add", "end")])
    return Simulation(
        trace, policy, Pricing(timing, node_startup_s=45.0, price_per_node_hour=1.0, startup_cores=cores)
    ).run()


def ready_at(sim: Simulation, node: str) -> float:
    return next(e.time_s for e in sim.events if e.kind == "ready" and node in e.detail["nodes"])


def test_a_node_that_joins_during_a_restart_shares_the_cores_with_it():
    sim = run([(500, "remove", "n6"), (505, "add", "n7")], cores=2.0)
    # the restart (from 502, after the checkpoint) relaunches the 5 nodes up (n5 idle), 0.4
    # of a core each for 20 s: 8 core-s each; at 505 each has 6.8 left; with n7, 6
    # processes get a third of a core: the start-up ends at 505 + 20.4, the restart 20 s
    # later; n7 has had 6.8 of its 45 core-s by then and takes the rest with a whole core
    assert resumed_at(sim)[1] == pytest.approx(545.4)
    assert ready_at(sim, "n7") == pytest.approx(525.4 + 38.2)
    alone = run([(500, "remove", "n6"), (505, "add", "n7")], cores=None)
    assert resumed_at(alone)[1] == pytest.approx(542.0) and ready_at(alone, "n7") == pytest.approx(550.0)


def test_a_node_that_joins_while_training_starts_in_its_own_time():
    shared, alone = run([(300, "add", "n7")], cores=2.0), run([(300, "add", "n7")], cores=None)
    assert ready_at(shared, "n7") == ready_at(alone, "n7") == pytest.approx(345.0)
    assert resumed_at(shared) == resumed_at(alone)
    assert shared.iterations == alone.iterations


def test_a_restart_alone_takes_its_calibrated_time():
    rows = [(500, "remove", "n6"), (530, "remove", "n5")]
    assert resumed_at(run(rows, cores=2.0)) == resumed_at(run(rows, cores=None)) == [85.0, 570.0]


def test_a_node_lost_while_its_processes_start_gives_its_share_back():
    # the restart (from 502, after the checkpoint) relaunches the 5 nodes up, 8 core-s
    # each at 0.4 of a core; n4 at 510: 4.8 core-s left each, 4 processes at half a core:
    # the start-up ends at 519.6 (522 without the pool), then a restart of n1-n3 and n5
    shared = run([(500, "remove", "n6"), (510, "remove", "n4")], cores=2.0)
    alone = run([(500, "remove", "n6"), (510, "remove", "n4")], cores=None)
    assert resumed_at(shared) == [85.0, pytest.approx(519.6 + 40.0)]
    assert resumed_at(alone) == [85.0, 562.0]


def test_a_node_removed_while_it_starts_leaves_the_pool():
    sim = run([(500, "remove", "n6"), (505, "add", "n7"), (506, "remove", "n7")], cores=2.0)
    # n7 had a third of a core for 1 s, and so had each of the restart's 5 processes (not 0.4)
    assert not any(e.kind == "ready" and "n7" in e.detail["nodes"] for e in sim.events)
    # at 506 each has 6.8 - 1/3 core-s left; 5 processes at 0.4 of a core
    assert resumed_at(sim)[1] == pytest.approx(506.0 + (6.8 - 1 / 3) / 0.4 + 20.0)


def test_startup_cores_is_checked_by_name():
    with pytest.raises(SimError, match="startup_cores must be a finite number > 0, got 0"):
        SimConfig.of(calibration="planner", startup_cores=0)
    with pytest.raises(SimError, match="startup_cores must be a finite number > 0, got -1"):
        SimConfig.of(calibration="planner", startup_cores=-1)
    with pytest.raises(SimError, match="startup_cores"):
        SimConfig.of(startup_cores=2)  # the artifact calibration has no such host
