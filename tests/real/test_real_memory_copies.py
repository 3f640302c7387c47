"""In-memory copies (GEMINI on the real backend), the pure parts and the node memory.

The rank-level copy order derived from a design's node placement, the layers' holders once
a copy is complete, where a restart from a copy reads each layer, the coordinator's book
of complete copies (which one a `RestartFromSnapshot` gets after losses), a node's memory
on disk, and the directive's JSON form. Hand-computed cases, and properties over random
layouts and placements (hypothesis). The processes themselves: `test_real_gemini`.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from designs import MemoryCopies
from designs.gemini.policy import PLACEMENTS, placement
from real.control.memory import MemoryBook
from real.protocol import keys
from real.protocol.copies import CopyOrder, copy_order, copy_transfers, due, layer_holders
from real.protocol.directive import RESTART, Directive
from real.protocol.layout import Layout, PipelineAssignment, StageAssignment, sync_groups
from real.protocol.sources import MEMORY, Source
from real.state.transfers import LostLayers, memory_sources, transfers


def layout_of(pipelines: list[list[tuple[str, int]]], num_layers: int, generation: int = 0) -> Layout:
    """Pipelines of (node, gpu) stages, layers split as evenly as possible, 4 microbatches each."""
    stages: list[StageAssignment] = []
    pipes: list[PipelineAssignment] = []
    for p, gpus in enumerate(pipelines):
        ranks = []
        cuts = [round(i * num_layers / len(gpus)) for i in range(len(gpus) + 1)]
        for s, (node, gpu) in enumerate(gpus):
            rank = len(stages)
            stages.append(StageAssignment(rank, p, s, len(gpus), cuts[s], cuts[s + 1], node, gpu))
            ranks.append(rank)
        pipes.append(PipelineAssignment(p, tuple(ranks), 4, 4 * p, 1 / len(pipelines), 1.0))
    layout = Layout(generation, num_layers, 4 * len(pipelines), 1, tuple(stages), tuple(pipes),
                    sync_groups(stages, len(pipelines), num_layers), 1.0)  # fmt: skip
    layout.validate()
    return layout


THREE = layout_of([[("n0", 0), ("n1", 0), ("n2", 0)]], 6)  # layers 0-1 on n0, 2-3 on n1, 4-5 on n2
RING1 = placement(["n0", "n1", "n2"], 1, "ring")  # n0 -> n1, n1 -> n2, n2 -> n0


def test_the_order_sends_each_rank_to_its_nodes_peers_and_every_message_is_listed_once():
    order = copy_order(THREE, 2, RING1)
    assert order.sends == ((1,), (2,), (0,))
    plan = copy_transfers(order, THREE)
    assert [(t.src, t.dst, t.layer) for t in plan] == [(0, 1, 0), (0, 1, 1), (1, 2, 2), (1, 2, 3), (2, 0, 4), (2, 0, 5)]
    assert [t.tag for t in plan] == list(range(6))
    assert layer_holders(order, THREE) == {0: {"n0", "n1"}, 1: {"n0", "n1"}, 2: {"n1", "n2"}, 3: {"n1", "n2"},
                                           4: {"n2", "n0"}, 5: {"n2", "n0"}}  # fmt: skip
    assert [due(order, k, 6) for k in range(7)] == [False, False, True, False, True, False, False]
    assert not due(None, 2, 6)


def test_two_gpus_per_node_share_the_receiving_by_position():
    layout = layout_of([[("a", 0), ("a", 1), ("b", 0), ("b", 1)]], 4)
    order = copy_order(layout, 1, placement(["a", "b"], 1))
    assert order.sends == ((2,), (3,), (0,), (1,))  # a/gpu0 -> b/gpu0, a/gpu1 -> b/gpu1, and back


def test_a_holder_outside_the_layout_receives_nothing():
    order = copy_order(THREE, 1, {"n0": frozenset({"n0", "spare"}), "n1": frozenset({"n1"}), "n2": frozenset({"n2"})})
    assert order.sends == ((), (), ())


def test_a_restart_reads_its_own_nodes_memory_else_a_holders_and_fails_without_one():
    holders = {0: frozenset({"n1"}), 1: frozenset({"n1"}), 2: frozenset({"n1", "n2"}), 3: frozenset({"n2"})}
    layout = layout_of([[("n1", 0), ("n2", 0)]], 4, generation=3)  # layers 0-1 on n1, 2-3 on n2
    sources = memory_sources(layout, holders)
    assert sources == (
        (Source(0, MEMORY, 0), Source(1, MEMORY, 0)),
        (Source(2, MEMORY, 1), Source(3, MEMORY, 1)),
    )
    moved = memory_sources(layout_of([[("n2", 0), ("n1", 0)]], 4), holders)  # the stages swapped nodes
    # rank 0 (n2) has layers 0-1 sent by rank 1 (n1); rank 1 (n1) reads layer 2 itself, gets 3 from rank 0 (n2)
    assert moved == ((Source(0, MEMORY, 1), Source(1, MEMORY, 1)), (Source(2, MEMORY, 1), Source(3, MEMORY, 0)))
    assert [(t.layer, t.src, t.dst) for t in transfers(moved)] == [(0, 1, 0), (1, 1, 0), (3, 0, 1)]
    assert transfers(sources) == ()  # everyone reads its own node's memory
    with pytest.raises(LostLayers, match=r"\[3\]"):
        memory_sources(layout_of([[("n1", 0), ("n0", 0)]], 4), holders)


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.integers(1, 7),
    replicas=st.integers(1, 3),
    kind=st.sampled_from(PLACEMENTS),
    pipelines=st.integers(1, 2),
    lost=st.sets(st.integers(0, 6), max_size=3),
)
def test_holders_follow_the_placement_and_a_restart_reads_only_live_holders(nodes, replicas, kind, pipelines, lost):
    names = [f"n{i}" for i in range(nodes)]
    per_pipe = max(1, nodes // pipelines)
    pipes = [[(n, 0) for n in names[p * per_pipe : (p + 1) * per_pipe]] for p in range(min(pipelines, nodes))]
    layout = layout_of(pipes, 6)
    where = placement(names, replicas, kind)
    order = copy_order(layout, 1, where)
    held = layer_holders(order, layout)
    for stage in layout.stages:  # every layer is held by every holder of each node running it
        for layer in stage.layers:
            assert where[stage.node] & set(layout_nodes(layout)) <= held[layer]
    for t in copy_transfers(order, layout):
        assert layout.stages[t.dst].node in where[layout.stages[t.src].node] - {layout.stages[t.src].node}
    gone = {names[i] for i in lost if i < nodes}
    left = [n for n in names if n not in gone]
    live = {l: h - gone for l, h in held.items()}
    if not left:
        return
    survivors = layout_of([[(n, 0) for n in left]], 6, generation=1)
    if any(not h & set(left) for h in live.values()):
        with pytest.raises(LostLayers):
            memory_sources(survivors, live)
        return
    for stage, per_rank in zip(survivors.stages, memory_sources(survivors, live)):
        assert [s.layer for s in per_rank] == list(stage.layers)
        for s in per_rank:
            assert s.kind == MEMORY and survivors.stages[s.rank].node in live[s.layer]


def layout_nodes(layout: Layout) -> set[str]:
    return {s.node for s in layout.stages}


def _ring(nodes):
    return placement(nodes, 1, "ring")


def test_the_book_keeps_the_newest_complete_copy_and_picks_what_survives():
    torch_dist = pytest.importorskip("torch.distributed")
    store = torch_dist.HashStore()
    book = MemoryBook(MemoryCopies(1, _ring), store, None, local=False)
    order = book.order(THREE, ["n0", "n1", "n2"])
    assert order == copy_order(THREE, 1, RING1)
    directive = Directive(0, RESTART, THREE, (0, 1, 2), 0, tuple(tuple(Source(l, "init") for l in s.layers)
                          for s in THREE.stages), copies=order)  # fmt: skip
    for step, ranks in ((1, 3), (2, 3), (3, 2)):  # the copy of step 3 is not complete: one rank missing
        store.add(keys.copy_done_key(0, step), ranks)
    seen = []
    book.close(directive, 4, lambda held: seen.append(held.step))
    assert seen == [1, 2] and [c.step for c in book.copies] == [2]
    book.close(directive, 4, lambda held: seen.append(held.step))  # once per generation
    assert seen == [1, 2]
    copy, why = book.pick(3, ["n1", "n2"], 0, 4)
    assert copy is not None and copy.step == 2 and "not complete" in why
    book.lose(["n0"])
    copy, why = book.pick(2, ["n1", "n2"], 0, 4)
    assert copy is not None and copy.step == 2 and why == ""
    assert copy.holders[0] == {"n1"} and copy.holders[4] == {"n2"}
    assert book.pick(2, ["n1", "n2"], 3, 4) == (None, "the copy of step 2 is outside steps 3..4")
    book.lose(["n1"])  # n0 and n1 held layers 0-1: gone
    copy, why = book.pick(2, ["n2"], 0, 4)
    assert copy is None and "layers [0, 1]" in why
    book.rolled_back(1)
    assert book.copies == []


def test_a_node_keeps_copies_in_memory_and_drops_older_ones(tmp_path):
    torch = pytest.importorskip("torch")
    from real.state.memory import NodeMemory

    memory = NodeMemory(tmp_path, "n0")
    for g, k in ((0, 2), (0, 3), (1, 3), (1, 4)):
        memory.put(g, k, 5, torch.full((4,), float(10 * g + k), dtype=torch.float64))
    assert memory.copies() == [(0, 2), (0, 3), (1, 3), (1, 4)]
    assert memory.get(1, 3, 5).tolist() == [13.0] * 4
    memory.prune(1, 3)
    assert memory.copies() == [(1, 3), (1, 4)]
    with pytest.raises(RuntimeError, match="not in"):
        memory.get(0, 2, 5)
    memory.clear()
    assert memory.copies() == []


def test_the_directive_carries_the_copy_order_and_the_copy_to_restore():
    sources = memory_sources(THREE, {l: frozenset({"n0", "n1", "n2"}) for l in range(6)})
    order = CopyOrder(2, ((1,), (2,), (0,)))
    d = Directive(4, RESTART, THREE, (7, 8, 9), 3, sources, copies=order, memory_from=2)
    back = Directive.from_dict(d.to_dict())
    assert back == d and back.copies == order and back.memory_from == 2
    with pytest.raises(ValueError, match="in-memory copy"):
        Directive(4, RESTART, THREE, (7, 8, 9), 3, sources)
    with pytest.raises(ValueError, match="receivers per rank"):
        Directive(4, RESTART, THREE, (7, 8, 9), 3, sources, copies=CopyOrder(1, ((1,),)), memory_from=2)
    with pytest.raises(ValueError, match="names its rank"):
        Source(0, MEMORY)
