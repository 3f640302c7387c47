"""The coordinator's recovery decisions, without a worker process.

The coordinator and its `RecoveryFlow` run for real, in this process, on a real
TCPStore (loopback, port 0). Only the boundary is faked: a launcher (`FakeLauncher`, the
`ProcessControl` the coordinator drives) whose "processes" register in the store and die
when told, and the workers' writes to the store (commits, teardown reports, checkpoint
files), written here as the worker side would. Expectations come from the inputs: which
node was lost, which steps were committed, what the survivors hold.
"""

from __future__ import annotations

import signal
import time
from dataclasses import asdict
from pathlib import Path

import pytest

pytest.importorskip("torch")

from real.config import RunConfig  # noqa: E402
from real.control.coordinator import Coordinator  # noqa: E402
from real.control.membership import Membership  # noqa: E402
from real.control.schedule import EventSchedule  # noqa: E402
from real.protocol import keys  # noqa: E402
from real.protocol import rendezvous as rv  # noqa: E402
from real.protocol.directive import RECONFIGURE, RESTART, START, Directive  # noqa: E402
from real.protocol.manifest import layer_path  # noqa: E402
from real.protocol.sources import CHECKPOINT, INIT, LOCAL, PEER  # noqa: E402
from real.worker.session import report_checkpoint_failure  # noqa: E402


class FakeLauncher:
    """Worker "processes" that exist only as registrations in the store."""

    def __init__(self, store, secret):
        self.store, self.secret = store, secret
        self.alive: dict[int, str] = {}  # pid -> node
        self.exits: dict[int, int] = {}
        self.next_pid = 1000
        self.crash_on_poll: dict[int, str] = {}  # exited() call number -> node to crash then
        self.polls = 0
        self.worker_of: dict[int, int] = {}
        self.saves: str | None = None  # how the workers answer save orders: "write", "fail", None (never)
        self.orders_read = 0
        self.directory: Path | None = None

    def spawn(self, node: str, gpu: int) -> int:
        pid, self.next_pid = self.next_pid, self.next_pid + 1
        self.alive[pid] = node
        wid = self.store.add(keys.WORKER_COUNT, 1) - 1
        self.worker_of[pid] = wid
        body = asdict(rv.WorkerInfo(wid, node, gpu, "fake", pid))
        rv.put_json(self.store, keys.worker_key(wid), {**body, "proof": self.secret.sign(body)})
        return pid

    def signal(self, pid: int, sig: int) -> bool:
        if pid not in self.alive:
            return False
        if sig == signal.SIGKILL:
            del self.alive[pid]
            self.exits[pid] = -9
        return True

    def exited(self) -> dict[int, int]:
        self.polls += 1
        if self.polls in self.crash_on_poll:
            self.crash(self.crash_on_poll.pop(self.polls))
        for pid in self.alive:  # the live workers' heartbeat threads
            self.store.add(keys.heartbeat_key(self.worker_of[pid]), 1)
        while self.store.check([keys.order_key(self.orders_read)]):  # the workers follow the orders
            order = rv.get_json(self.store, keys.order_key(self.orders_read))["value"]  # signed: {value, mac}
            self.orders_read += 1
            if order["kind"] == "save" and self.saves:
                self.answer_save(order)
        out, self.exits = self.exits, {}
        return out

    def answer_save(self, order: dict) -> None:
        g, a, step = order["generation"], order["attempt"], order["step"]
        if self.saves == "fail":
            report_checkpoint_failure(self.store, g, a, step, "worker 0: OSError: [Errno 28] No space left on device")
            return
        assert self.directory is not None, "the test sets the checkpoint directory before any save"
        for layers in order["writers"].values():
            write_layers(self.store, self.directory, g, a, step, layers)

    def owns(self, pid: int) -> bool:
        return pid in self.alive

    def pids_of(self, node: str) -> list[int]:
        return [pid for pid, n in self.alive.items() if n == node]

    def crash(self, node: str) -> None:
        for pid in self.pids_of(node):
            self.signal(pid, signal.SIGKILL)


def write_layers(store, directory: Path, generation: int, attempt: int, step: int, layers) -> None:
    """What writers do: each layer file on disk, then reported under the checkpoint's keys."""
    for layer in layers:
        path = directory / layer_path(step, layer)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        store.set(keys.layer_key(generation, attempt, step, layer), "1")


def started(tmp_path: Path, **overrides) -> tuple[Coordinator, FakeLauncher]:
    """A coordinator that has published generation 0 over its launcher's nodes."""
    settings = dict(
        nodes=4,
        steps=6,
        timeout_s=0.5,
        heartbeat_timeout_s=2.0,
        startup_timeout_s=10.0,
        wait_for_nodes_s=1.0,
        checkpoint_every=0,
    )
    config = RunConfig(**{**settings, **overrides})
    c = Coordinator(config, run_dir=tmp_path)
    launcher = FakeLauncher(c.store, c.secret)
    c.members = Membership(c.store, config.gpus_per_node, config.heartbeat_timeout_s, launcher, c.secret)
    c.schedule = EventSchedule(None, c.injections, c.members, c.outcome, config.gpus_per_node, launcher)
    for node in c.initial_nodes:
        for gpu in range(config.gpus_per_node):
            launcher.spawn(node, gpu)
    launcher.directory = Path(c.config.checkpoint_dir) if c.config.checkpoint_dir else None
    c._await_initial()
    c._start()
    assert c.job.gen == 0 and c.job.directive is not None and c.job.directive.kind == START
    assert c.on_generation_ready(time.time()), "every rank holds its layers: go"
    return c, launcher


def commit(c: Coordinator, steps: int) -> None:
    """Every rank of the current generation reports and commits steps [committed, steps)."""
    d = c.job.directive
    assert d is not None, "a generation is running"
    for step in range(c.job.committed, steps):
        for rank in range(d.layout.world_size):
            rv.put_json(c.store, keys.step_key(d.generation, step, rank), {"t": time.time(), "loss_sum": 1.0})
        c.store.set(keys.commit_key(d.generation, step), "ok")
        c.record_commit(d.generation, step, d)


def leave(c: Coordinator, step: int, except_nodes=()) -> None:
    """Survivors tear down and report their layers, ready for `step`."""
    d, members = c.job.directive, c.members
    assert d is not None and members is not None, "a generation is running"
    for stage in d.layout.stages:
        wid = d.workers[stage.rank]
        if members.workers[wid].alive and stage.node not in except_nodes:
            rv.put_json(
                c.store,
                keys.left_key(d.generation, stage.rank),
                {"worker": wid, "step": step, "layers": list(stage.layers), "t": time.time()},
            )


def fail(c: Coordinator) -> bool:
    c.job.failure_detected_s = time.time()
    return c.flow.after_failure()


def published(c: Coordinator) -> Directive:
    """The directive as workers read it from the store (and as the coordinator holds it)."""
    d = Directive.from_dict(rv.get_signed(c.store, keys.directive_key(c.job.gen), c.secret))
    assert d == c.job.directive
    return d


def test_oobleck_loses_a_node_and_reconfigures_live_from_the_survivors(tmp_path):
    c, launcher = started(tmp_path)
    before = c.job.directive
    commit(c, 2)
    lost = before.layout.stages[-1].node
    launcher.crash(lost)
    leave(c, 2)
    assert fail(c) is False
    d = published(c)
    assert (d.generation, d.kind, d.resume_step) == (1, RECONFIGURE, 2)
    assert lost not in {s.node for s in d.layout.stages}
    held = {
        wid: set(before.layout.stages[r].layers)
        for r, wid in enumerate(before.workers)
        if before.layout.stages[r].node != lost
    }
    for rank, per_rank in enumerate(d.sources):
        for s in per_rank:
            assert s.kind in (LOCAL, PEER)
            holder = d.workers[rank] if s.kind == LOCAL else d.workers[s.rank]
            assert s.layer in held[holder], (
                f"rank {rank} gets layer {s.layer} from worker {holder}, which never held it"
            )
    assert c.job.committed == 2 and c.outcome.reconfigurations == 1 and c.outcome.restarts == 0
    assert c.job.recovery.until_step == 2 and c.job.recovery.nodes == [lost]


def test_a_step_without_a_verdict_is_aborted_and_becomes_the_resume_step(tmp_path):
    c, launcher = started(tmp_path)
    commit(c, 3)
    d0 = c.job.directive
    for rank in range(d0.layout.world_size):  # step 3 reached its reports but no verdict
        rv.put_json(c.store, keys.step_key(0, 3, rank), {"t": time.time(), "loss_sum": 1.0})
    launcher.crash(d0.layout.stages[0].node)
    leave(c, 3)
    fail(c)
    assert c.store.get(keys.commit_key(0, 3)).decode() == "abort"
    assert c.store.get(keys.resume_key(0)).decode() == "3"
    assert published(c).resume_step == 3 and c.job.committed == 3


def test_a_node_lost_while_survivors_report_joins_the_same_recovery(tmp_path):
    c, launcher = started(tmp_path, nodes=5)
    d0 = c.job.directive
    nodes = list(dict.fromkeys(s.node for s in d0.layout.stages))
    first, second = nodes[0], nodes[-1]
    commit(c, 1)
    launcher.crash(first)
    leave(c, 1, except_nodes=(second,))  # the second node never reports: it dies meanwhile
    launcher.crash_on_poll[launcher.polls + 2] = second
    fail(c)
    d = published(c)
    assert {first, second}.isdisjoint(s.node for s in d.layout.stages)
    assert sorted(c.job.recovery.nodes) == sorted([first, second])
    assert len(c.outcome.recoveries) == 0 and c.job.recovery is not None  # one recovery, not yet over


def test_varuna_saves_the_survivors_state_stops_everything_and_restarts_from_it(tmp_path):
    c, launcher = started(tmp_path, policy="varuna", checkpoint_every=100)
    before = c.job.directive
    commit(c, 2)
    launcher.saves = "write"  # the writers named in the save order put their layers on disk and report them
    lost = before.layout.stages[-1].node
    launcher.crash(lost)
    leave(c, 2)
    fail(c)
    d = published(c)
    assert (d.kind, d.resume_step, d.checkpoint.step) == (RESTART, 2, 2)
    assert all(s.kind == CHECKPOINT for per_rank in d.sources for s in per_rank)
    assert set(d.workers).isdisjoint(before.workers), "stop everything: every rank is a fresh process"
    assert lost not in {s.node for s in d.layout.stages}
    assert c.outcome.restarts == 1 and c.outcome.lost_iterations == 0 and c.job.recovery.kind == "restart"


def test_varuna_without_a_usable_checkpoint_rolls_back_to_the_start(tmp_path):
    # the save's deadline short: nothing will be written, and the default 30 s only waits
    c, launcher = started(tmp_path, policy="varuna", checkpoint_every=100, checkpoint_timeout_s=2.0)
    commit(c, 2)
    launcher.crash(c.job.directive.layout.stages[-1].node)
    leave(c, 2)
    fail(c)  # no layer is reported written: the save fails at its deadline
    d = published(c)
    assert (d.kind, d.resume_step, d.checkpoint) == (RESTART, 0, None)
    assert all(s.kind == INIT for per_rank in d.sources for s in per_rank)
    assert c.job.committed == 0 and c.outcome.lost_iterations == 2


def test_an_unclean_survivor_without_respawn_costs_its_node(tmp_path):
    c, launcher = started(tmp_path, respawn=False)
    d0 = c.job.directive
    nodes = list(dict.fromkeys(s.node for s in d0.layout.stages))
    lost, silent = nodes[0], nodes[1]
    commit(c, 1)
    launcher.crash(lost)
    leave(c, 1, except_nodes=(silent,))  # alive, but never tears down
    fail(c)
    d = published(c)
    assert {lost, silent}.isdisjoint(s.node for s in d.layout.stages)
    assert not launcher.pids_of(silent), "the unclean worker is fenced (killed)"


# -- checkpoints: failed writes, deadlines, scoped keys, restarts from the newest complete one --
def periodic(c: Coordinator, step: int, layers=None) -> None:
    """The layer owners report their part of the periodic checkpoint of `step`."""
    assert c.config.checkpoint_dir is not None
    write_layers(
        c.store,
        Path(c.config.checkpoint_dir),
        c.job.gen,
        0,
        step,
        range(c.planner.profile.num_layers) if layers is None else layers,
    )
    c.tick()


def test_a_reported_write_failure_is_counted_and_the_next_interval_retries(tmp_path):
    c, launcher = started(tmp_path, steps=10, checkpoint_every=2)
    commit(c, 2)
    periodic(c, 2)
    assert c.job.manifest.step == 2 and c.outcome.checkpoints == 1
    commit(c, 4)
    report_checkpoint_failure(c.store, 0, 0, 4, "worker 1 (node1 gpu 0): OSError: [Errno 28] No space left on device")
    periodic(c, 4, layers=[0])  # the other writers' parts arrive, too late to matter
    assert c.outcome.failed_checkpoints == [4] and c.job.manifest.step == 2
    (event,) = [e for e in c.outcome.events if e.kind == "checkpoint_failed"]
    assert event.detail["step"] == 4 and "No space left" in event.detail["reason"]
    commit(c, 6)
    periodic(c, 6)
    assert c.job.manifest.step == 6 and c.job.manifest.kept == (2, 6)
    assert sorted(p.name for p in Path(c.config.checkpoint_dir).glob("step*")) == ["step2", "step6"], (
        "the failed step 4 is cleared"
    )


def test_a_checkpoint_not_durable_by_its_deadline_fails_and_the_job_goes_on(tmp_path):
    c, launcher = started(tmp_path, steps=10, checkpoint_every=2, checkpoint_timeout_s=0.3)
    commit(c, 2)
    periodic(c, 2, layers=[0, 1])  # some writer hangs: the rest never comes
    assert c.job.ckpt_pending and not c.outcome.failed_checkpoints
    time.sleep(0.35)
    c.tick()
    assert c.outcome.failed_checkpoints == [2] and not c.job.ckpt_pending and c.job.manifest is None
    commit(c, 3)
    assert c.job.committed == 3


def test_reports_of_an_aborted_generation_never_complete_a_later_checkpoint_of_the_same_step(tmp_path):
    c, launcher = started(tmp_path, policy="varuna", steps=10, checkpoint_every=2)
    commit(c, 2)
    periodic(c, 2)
    commit(c, 3)
    launcher.saves = "fail"
    lost = c.job.directive.layout.stages[-1].node
    launcher.crash(lost)
    leave(c, 3)
    fail(c)  # the save of step 3 fails: back to step 2, in generation 1
    assert c.job.gen == 1 and c.job.committed == 2
    layers = range(c.planner.profile.num_layers)
    write_layers(c.store, Path(c.config.checkpoint_dir), 0, 0, 4, layers)  # generation 0's step 4 (undone work)
    assert c.on_generation_ready(time.time())
    commit(c, 4)
    assert c.job.manifest.step == 2, "generation 0's reports do not count for generation 1"
    periodic(c, 4)
    assert c.job.manifest.step == 4


def test_a_failed_varuna_save_is_a_failed_checkpoint_and_the_restart_uses_the_newest_complete_one(tmp_path):
    c, launcher = started(tmp_path, policy="varuna", steps=10, checkpoint_every=2)
    commit(c, 2)
    periodic(c, 2)
    commit(c, 4)
    periodic(c, 4, layers=[0])  # step 4's checkpoint stays incomplete...
    report_checkpoint_failure(c.store, 0, 0, 4, "worker 2: OSError: [Errno 30] Read-only file system")
    c.tick()
    commit(c, 5)
    launcher.saves = "fail"  # ...and the save after the failure hits a full disk
    launcher.crash(c.job.directive.layout.stages[-1].node)
    leave(c, 5)
    fail(c)
    d = published(c)
    assert c.outcome.failed_checkpoints == [4, 5]
    assert (d.kind, d.resume_step, d.checkpoint.step) == (RESTART, 2, 2)
    assert c.outcome.lost_iterations == 3 and c.outcome.status == "running"
    (note,) = [e for e in c.outcome.events if e.kind == "restart_from_checkpoint"]
    assert note.detail["step"] == 2 and note.detail["failed_since"] == [4, 5]


def test_a_restart_falls_back_to_the_older_kept_checkpoint_when_a_file_of_the_newest_is_gone(tmp_path):
    c, launcher = started(tmp_path, steps=10, checkpoint_every=2, pipelines=(2, 2))
    d0 = c.job.directive
    commit(c, 2)
    periodic(c, 2)
    commit(c, 4)
    periodic(c, 4)
    assert c.job.manifest.kept == (2, 4)
    (Path(c.config.checkpoint_dir) / layer_path(4, 1)).unlink()
    stage0 = [s.node for s in d0.layout.stages if 0 in s.layers]  # every holder of layer 0: no replica left
    for node in stage0:
        launcher.crash(node)
    leave(c, 4)
    fail(c)
    d = published(c)
    assert (d.kind, d.resume_step, d.checkpoint.step) == (RESTART, 2, 2)
    missing = [e for e in c.outcome.events if e.kind == "checkpoint_missing"]
    assert [(e.detail["step"], e.detail["layers"]) for e in missing] == [(4, [1])]


def test_a_stall_fired_after_its_failure_is_counted_and_never_starts_the_next_recovery(tmp_path):
    """A survivor stalls in a slow teardown after the coordinator has read the fired
    injections of its failure (the CI failure of 2026-12-03): it is still counted, and
    its stamp is not the next failure's time."""
    c, launcher = started(tmp_path, nodes=4, steps=10, inject="2:node3:crash,2:node0:stall:teardown,5:node1:crash")
    commit(c, 2)
    t_crash = time.time()
    c.store.set(keys.fired_key(0), repr(t_crash))
    launcher.crash("node3")
    leave(c, 2)
    fail(c)
    assert c.outcome.injections_fired == [0]
    assert c.job.recovery.t_fail_s == pytest.approx(t_crash - c.outcome.t0_wall)
    c.store.set(keys.fired_key(1), repr(time.time()))  # node0 reaches its teardown now, late
    commit(c, 5)
    assert c.job.recovery is None, "the first recovery is over"
    time.sleep(0.05)
    t_second = time.time()
    c.store.set(keys.fired_key(2), repr(t_second))
    launcher.crash("node1")
    leave(c, 5)
    fail(c)
    assert sorted(c.outcome.injections_fired) == [0, 1, 2]
    assert c.job.recovery.t_fail_s == pytest.approx(t_second - c.outcome.t0_wall)


def test_a_job_that_ends_records_injections_fired_since_the_last_failure(tmp_path):
    """The end of a run sweeps the fired stamps once more (here a run that fails at once:
    a time-based entry needs the local launcher)."""
    config = RunConfig(nodes=2, steps=4, inject="1:node0:stall:teardown,2s:node1:crash", startup_timeout_s=10.0)
    c = Coordinator(config, run_dir=tmp_path)
    c.store.set(keys.fired_key(0), repr(time.time()))
    out = c.run(None)
    assert out.status == "failed" and "local launcher" in out.reason
    assert out.injections_fired == [0]


def test_a_node_lost_in_a_stop_planned_inside_a_recovery_belongs_to_that_recovery(tmp_path):
    """Varuna's restart is ready, and before its first step the job stops again as planned
    (a morph on joins, decided at the pause's end); a node of the new plan dies while its
    processes start. The recovery under way goes on with that failure counted (the
    16-node validation of 2026-12-03 lost its first recovery's record here)."""
    from planner.policies import Decision, Restart

    c, launcher = started(tmp_path, policy="varuna", checkpoint_every=100, nodes=4)
    commit(c, 2)
    launcher.saves = "write"
    first = c.job.directive.layout.stages[-1].node
    launcher.crash(first)
    leave(c, 2)
    fail(c)
    recovery = c.job.recovery
    assert recovery is not None and recovery.until_step == 2 and published(c).kind == RESTART
    assert c.on_generation_ready(time.time()), "the restart is ready: go"
    plan = c.job.decision.plan
    c.job.pending_decision = Decision(plan, (Restart("a planned morph"),), c.job.decision.memory)
    second = next(n for n in plan.nodes if n != first)
    launcher.crash_on_poll[launcher.polls + 1] = second  # dies while the planned restart starts
    leave(c, 2)
    c.flow.after_stop()
    assert any(e.kind == "nodes_lost_while_reconfiguring" for e in c.outcome.events)
    assert c.job.recovery is recovery, "the same recovery, not a new one"
    assert recovery.failures == 2 and sorted(recovery.nodes) == sorted([first, second])
    assert recovery.until_step == 2 and c.outcome.recoveries == []
    assert second not in {s.node for s in published(c).layout.stages}
    commit(c, 3)
    assert c.outcome.recoveries == [recovery] and recovery.done
