"""Checkpoints priced by the planner's model for the writers the backend really has
(real/control/checkpoint_accounting.py), on the in-process coordinator of
test_real_recovery_decisions (a real store, faked worker processes).

Expectations are worked out here from the layout and the profile, independently of the
accounting module: who writes which layer (layer l by its holder in pipeline l mod P; a
Varuna save by the holders named in its order; a load by every rank, its own layers), the
bytes per node by the profile's `copy_bytes`, and the storage's seconds.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("torch")

from planner.checkpoint_cost import as_ranges, owner_writes  # noqa: E402
from real.control.checkpoint_accounting import periodic_writers  # noqa: E402
from real.control.results import summarize  # noqa: E402
from real.protocol import keys  # noqa: E402
from real.protocol import rendezvous as rv  # noqa: E402
from real.protocol.manifest import layer_path  # noqa: E402

from .test_real_recovery_decisions import commit, fail, leave, started  # noqa: E402

GB = 1e9


def write_sized(c, step: int, writers) -> None:
    """The writers put layer l on disk as l + 1 KB, then report it."""
    directory = Path(c.config.checkpoint_dir)
    for layers in writers.values():
        for layer in layers:
            path = directory / layer_path(step, layer)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"x" * 1000 * (layer + 1))
            c.store.set(keys.layer_key(c.job.gen, 0, step, layer), "1")
    c.tick()


def test_a_periodic_checkpoint_is_priced_for_its_owners_in_pipeline_l_mod_p(tmp_path):
    c, _ = started(
        tmp_path, nodes=4, pipelines=(2, 2), steps=10, checkpoint_every=2, storage_gb_per_s=0.5, checkpoint_fixed_s=0.25
    )
    layout = c.job.directive.layout
    num = len(layout.pipelines)
    assert num == 2, "two pipelines, so the rule splits each layer's holders"
    by_node: dict[str, list[int]] = {}
    for stage in layout.stages:
        by_node.setdefault(stage.node, []).extend(l for l in stage.layers if l % num == stage.pipeline)
    assert sorted(l for ls in by_node.values() for l in ls) == list(range(layout.num_layers))  # each layer once
    assert periodic_writers(layout) == {n: tuple(sorted(ls)) for n, ls in by_node.items()}
    # the same writers as the planner's owner rule on the plan's pipelines of nodes
    pipelines = [[as_ranges(layout.stages[r].layers) for r in p.ranks] for p in layout.pipelines]
    assert Counter(as_ranges(ls) for ls in by_node.values()) == owner_writes(pipelines)
    commit(c, 2)
    write_sized(c, 2, by_node)
    assert c.job.manifest.step == 2
    (account,) = c.outcome.checkpoint_accounts
    size = [layer.copy_bytes for layer in c.planner.profile.layers]
    per_node = {n: sum(size[l] for l in ls) for n, ls in by_node.items()}
    assert account.kind == "periodic" and account.step == 2 and account.nodes == len(per_node)
    assert account.busiest_node_bytes == max(per_node.values()) and account.total_bytes == sum(size)
    assert per_node[account.busiest_node] == account.busiest_node_bytes
    assert account.predicted_s == pytest.approx(0.25 + max(per_node.values()) / (0.5 * GB))
    assert account.measured_s is not None and 0 <= account.measured_s < 30
    files = {n: sum(1000 * (l + 1) for l in ls) for n, ls in by_node.items()}
    assert account.file_bytes == sum(files.values()) and account.busiest_node_file_bytes == max(files.values())
    (event,) = [e for e in c.outcome.events if e.kind == "checkpoint"]
    assert event.detail["predicted_s"] == account.predicted_s
    extra = summarize(c.outcome).extra
    assert extra["checkpoint_accounts"] == [account.to_dict()]
    json.dumps(extra["checkpoint_accounts"])  # travels in summary.json


def test_varuna_save_and_load_are_priced_for_their_own_writers_and_readers(tmp_path):
    c, launcher = started(tmp_path, policy="varuna", checkpoint_every=100, restart_load_gb_per_s=0.25)
    before = c.job.directive
    commit(c, 2)
    launcher.saves = "write"
    lost = before.layout.stages[-1].node
    launcher.crash(lost)
    leave(c, 2)
    fail(c)
    save, load = c.outcome.checkpoint_accounts
    orders = [rv.read_order(c.store.get(keys.order_key(i)), i, c.secret) for i in range(launcher.orders_read)]
    order = next(o for o in orders if o["kind"] == "save")
    size = [layer.copy_bytes for layer in c.planner.profile.layers]
    node_of = {str(w): c.members.workers[w].info.node for w in c.members.workers}
    wrote: dict[str, int] = {}
    for worker, layers in order["writers"].items():
        wrote[node_of[worker]] = wrote.get(node_of[worker], 0) + sum(size[l] for l in layers)
    assert lost not in wrote and save.kind == "save" and save.step == 2
    assert save.busiest_node_bytes == max(wrote.values()) and save.total_bytes == sum(size)
    # the load: every rank of the restarted plan reads all its layers itself, no exchange
    d = c.job.directive
    held: dict[str, set[int]] = {}
    for stage in d.layout.stages:
        held.setdefault(stage.node, set()).update(stage.layers)
    reads = {n: sum(size[l] for l in ls) for n, ls in held.items()}
    assert load.kind == "load" and load.step == 2 and load.recovery == c.job.recovery.index
    assert load.busiest_node_bytes == max(reads.values()) and load.total_bytes == sum(reads.values())
    assert load.predicted_s == pytest.approx(max(reads.values()) / (0.25 * GB))
    assert load.measured_s is None  # the recovery is not over: its copy phase is not known yet
