"""The contention profiler: busy neighbour processes on demand, and `ooblab profile --busy-neighbours`."""

from __future__ import annotations

import json
import os
import time

import pytest

from planner.contention import load_contention
from planner.oobleck_format import load_oobleck_profile
from real.config import TINY_GPT, TinyGptSpec
from real.launch.contention import BusyNeighbours, _sweep_order, measure_contention
from real.launch.pass_timing import time_passes
from real.launch.profiler import ProfilerSettings
from real.models.family import named

from .conftest import ooblab

SPEC = TinyGptSpec(vocab=64, seq_len=16, hidden=32, heads=2, blocks=1)
MODEL = named(TINY_GPT, SPEC)
SIZE_ARGS = ["--vocab", "64", "--seq-len", "16", "--hidden", "32", "--heads", "2", "--blocks", "1"]
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def _burn(pid: int, window_s: float = 1.0) -> float:
    before = _cpu_s(pid)
    time.sleep(window_s)
    return _cpu_s(pid) - before


def test_passes_time_every_layer_its_backward_and_its_step():
    pytest.importorskip("torch")
    times = time_passes(MODEL, ProfilerSettings(repeats=3, warmup=1))
    assert len(times) == SPEC.num_layers
    assert all(f > 0 and b > 0 and o > 0 for f, b, o in times), times
    # 256x the block's weights: each part 6-14x slower on a quiet machine; medians of 9
    # passes, since under the other test worker's load a median of 3 passes caught a
    # preempted narrow step (5.9 ms against the wide block's 3.8 ms at 64x)
    wide = TinyGptSpec(vocab=64, seq_len=16, hidden=512, heads=2, blocks=1)
    narrow_block, wide_block = (
        time_passes(MODEL, ProfilerSettings(repeats=9))[1],
        time_passes(named(TINY_GPT, wide), ProfilerSettings(repeats=9))[1],
    )
    assert all(w > n for w, n in zip(wide_block, narrow_block, strict=True)), (wide_block, narrow_block)


def test_sweep_order_goes_up_then_down():
    assert _sweep_order([2, 0, 1], 3) == [0, 1, 2, 2, 1, 0, 0, 1, 2]


@pytest.mark.timeout(120)
def test_neighbours_compute_on_demand_and_the_sweep_is_relative_to_its_reference():
    pytest.importorskip("torch")
    settings = ProfilerSettings(repeats=1, warmup=0, max_participants=1)
    with BusyNeighbours(MODEL, 1, timeout_s=60) as pool:
        pid = pool._procs[0].pid
        pool.busy(1)
        busy = _burn(pid)
        pool.busy(0)
        parked = _burn(pid)
        assert busy > 3 * parked + 0.05, (busy, parked)
        with pytest.raises(ValueError, match="2 busy neighbours asked of a pool of 1"):
            pool.busy(2)
        profile = measure_contention(MODEL, settings, [0], 1, rounds=1, pool=pool)
    assert not pool._procs[0].is_alive()
    assert profile.neighbour_counts == (0, 1) and profile.reference_neighbours == 1
    assert profile.factor(1) == 1.0 and profile.factor(0) > 0
    assert [len(layers) for _, layers in profile.measured_s] == [SPEC.num_layers] * 2
    total = {k: sum(f + b for f, b in layers) for k, layers in profile.measured_s}
    assert profile.factor(0) == pytest.approx(total[0] / total[1])


@pytest.mark.timeout(180)
def test_profile_command_writes_contention_json(tmp_path):
    out = tmp_path / "profile"
    args = ["profile", *SIZE_ARGS, "--repeats", "1", "--warmup", "0", "--max-participants", "1", "--out", str(out)]
    # no neighbours asked: the sweep's wiring without spawning load processes (the test above has them)
    result = ooblab([*args, "--busy-neighbours", "0", "--json"], 150)
    assert result.returncode == 0, result.stderr[-3000:]
    contention = load_contention(out)
    assert contention is not None and contention.neighbour_counts == (0,)
    assert contention.measured_s[0][0] == 0 and len(contention.measured_s[0][1]) == SPEC.num_layers
    assert json.loads(result.stdout)["compute_factor"] == {"0": 1.0}
    # the 1F1B hop beside each count (here 0), as measure_communication reads it
    assert [k for k, _ in contention.hop_overhead_s] == [0] and contention.hop_overhead_s[0][1] >= 0
    # the plan's layer times are the sweep's own at the reference count, so its factor 1 holds of them
    profile = load_oobleck_profile(out, 1)
    planned = [t for layer in profile.layers for t in (layer.forward_s, layer.backward_s)]
    assert planned == pytest.approx([t for pair in contention.measured_s[0][1] for t in pair], rel=1e-9)
    assert profile.optimizer is not None and len(profile.optimizer.step_s) == SPEC.num_layers
    assert all(s > 0 for s in profile.optimizer.step_s)
    bad = ooblab([*args, "--busy-neighbours", "0,one"], 60)
    assert bad.returncode == 2 and "--busy-neighbours must be whole numbers" in bad.stderr
    alone = ooblab([*args, "--reference-neighbours", "2"], 60)
    assert alone.returncode == 2 and "--reference-neighbours applies with --busy-neighbours" in alone.stderr
