"""The coordinator's straggler bound (`RecoveryFlow.collect` after its word): a rank that
was training (ready) and stays silent is fenced at the bound where a launcher can replace
it; one still setting up (built, not ready: importing, loading) or without a launcher
waits for the teardown timeout."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch.distributed as dist

from real.config import RunConfig
from real.control import recovery_flow
from real.control.job import JobState
from real.control.recovery_flow import RecoveryFlow
from real.protocol import keys
from real.protocol import rendezvous as rv
from real.worker.groups import main_thread_waits

TEARDOWN_S = 1.5
STRAGGLER_S = 0.3


class _Members:
    def __init__(self, workers: int, launcher: bool):
        self.workers = {w: SimpleNamespace(alive=True) for w in range(workers)}
        self.processes = object() if launcher else None
        self.fenced: dict[int, float] = {}

    def fence(self, wid: int, reason: str) -> None:
        self.workers[wid].alive = False
        self.fenced[wid] = time.time()


class _Outcome:
    def __init__(self):
        self.events: list[tuple[str, dict]] = []
        self.step_end_s: list[float] = []

    def event(self, kind: str, **detail) -> None:
        self.events.append((kind, detail))


def _collect(
    monkeypatch, launcher: bool, noted: dict | None = None, bound_s: float = STRAGGLER_S, noted_rank: int = 1
) -> tuple[_Members, _Outcome, set[int], float]:
    """`noted`: what `noted_rank`'s watch wrote when it straggled (none by default)."""
    monkeypatch.setattr(recovery_flow, "CheckpointBook", lambda job, control: None)
    monkeypatch.setattr(recovery_flow, "STRAGGLER_MIN_S", bound_s)
    monkeypatch.setattr(RunConfig, "teardown_timeout_s", property(lambda self: TEARDOWN_S))
    store = dist.HashStore()
    g = 4
    # rank 0 reported; rank 1 was training (ready) and is silent; rank 2 built its groups only
    rv.put_json(store, keys.left_key(g, 0), {"worker": 0, "step": 3, "layers": [0], "t": time.time()})
    for r in (0, 1):
        rv.put_json(store, keys.ready_key(g, r), {"t": time.time()})
    for r in (0, 1, 2):
        rv.put_json(store, keys.built_key(g, r), {"t": time.time()})
    if noted is not None:
        rv.put_json(store, keys.straggled_key(g, noted_rank), noted)
    members, outcome = _Members(3, launcher), _Outcome()
    control = SimpleNamespace(config=RunConfig(), store=store, outcome=outcome, members=members, tick=lambda: None)
    flow = RecoveryFlow(JobState(failure_detected_s=time.time()), control)
    t0 = time.time()
    _, unclean = flow.collect(g, SimpleNamespace(workers=[0, 1, 2]), after_word=True)  # type: ignore[arg-type]
    return members, outcome, unclean, t0


@pytest.mark.timeout(30)
def test_a_silent_training_rank_is_fenced_at_the_bound_and_one_setting_up_at_the_teardown_timeout(monkeypatch):
    members, outcome, unclean, t0 = _collect(monkeypatch, launcher=True)
    assert unclean == {1, 2}
    assert STRAGGLER_S <= members.fenced[1] - t0 < TEARDOWN_S / 2
    assert members.fenced[2] - t0 >= TEARDOWN_S
    reasons = {d["rank"]: d["reason"] for kind, d in outcome.events if kind == "worker_unclean"}
    assert "of the coordinator's word" in reasons[1] and "of the coordinator's word" not in reasons[2]


@pytest.mark.timeout(30)
def test_without_a_launcher_every_silent_rank_waits_for_the_teardown_timeout(monkeypatch):
    members, _, unclean, t0 = _collect(monkeypatch, launcher=False)
    assert unclean == {1, 2}
    assert min(members.fenced.values()) - t0 >= TEARDOWN_S


def test_the_bound_grows_with_the_last_steps():
    flow = RecoveryFlow.__new__(RecoveryFlow)
    flow.c = SimpleNamespace(outcome=SimpleNamespace(step_end_s=[10.0, 13.0, 16.5, 20.0]))
    assert flow.straggler_s() == pytest.approx(3 * 3.5)
    flow.c.outcome.step_end_s = [10.0, 13.0, 73.0, 76.5]  # one step spanned a 60 s restart
    assert flow.straggler_s() == pytest.approx(3 * 3.5)
    flow.c.outcome.step_end_s = [1.0, 1.5]
    assert flow.straggler_s() == recovery_flow.STRAGGLER_MIN_S


@pytest.mark.timeout(30)
def test_a_rank_stuck_beyond_any_sever_is_fenced_at_once(monkeypatch):
    # the bound is 1 s here: a rank whose watch noted it waits with no socket left to shut goes first
    stuck = {"resevered": 0, "stuck": True, "stack": "    w.wait()\n"}
    members, outcome, unclean, t0 = _collect(monkeypatch, launcher=True, noted=stuck, bound_s=1.0)
    assert unclean == {1, 2}
    assert members.fenced[1] - t0 < 0.5
    reasons = {d["rank"]: d["reason"] for kind, d in outcome.events if kind == "worker_unclean"}
    assert "re-sever found no socket" in reasons[1]


@pytest.mark.timeout(30)
def test_a_stuck_note_from_a_rank_not_yet_training_keeps_the_teardown_timeout(monkeypatch):
    # rank 2 built its groups only: it may be loading, slow rather than stuck (see above)
    stuck = {"resevered": 0, "stuck": True, "stack": "    store.wait([key])\n"}
    members, _, unclean, t0 = _collect(monkeypatch, launcher=True, noted=stuck, noted_rank=2)
    assert unclean == {1, 2}
    assert members.fenced[2] - t0 >= TEARDOWN_S


@pytest.mark.timeout(30)
def test_a_straggler_that_may_still_free_itself_waits_for_the_bound(monkeypatch):
    computing = {"resevered": 0, "stuck": False, "stack": "    time.sleep(0.5)\n"}
    members, _, unclean, t0 = _collect(monkeypatch, launcher=True, noted=computing, bound_s=1.0)
    assert unclean == {1, 2}
    assert 1.0 <= members.fenced[1] - t0 < TEARDOWN_S


@pytest.mark.timeout(30)
def test_the_watch_tells_a_wait_in_cpp_from_a_sleep():
    store = dist.HashStore()
    seen: list[bool] = []

    def look() -> None:
        time.sleep(0.3)
        seen.append(main_thread_waits())

    def in_a_store_wait() -> None:
        store.wait(["never"], timedelta(seconds=1))

    def asleep() -> None:
        time.sleep(1.0)

    for block in (in_a_store_wait, asleep):
        watcher = threading.Thread(target=look)
        watcher.start()
        try:
            block()
        except Exception:  # the store's wait times out
            pass
        watcher.join()
    assert seen == [True, False]
