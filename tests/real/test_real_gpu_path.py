"""The GPU path's parts that run without a GPU: device per local rank, NCCL settings and
teardown by abort, the abort watch, host staging, the host bridge, the profiler's timer,
and `benchmarks/gpu_check.py` refusing to run without CUDA (no processes but that one)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
import torch
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st

from real.config import ConfigError, RunConfig
from real.state.layer_state import LayerState, flatten, unflatten
from real.state.staging import from_wire, host_copies, stage_state, to_wire, wire_buffer
from real.worker.devices import DeviceError, select_device
from real.worker.nccl import (
    NCCL_ENVIRONMENT,
    AbortWatch,
    abort_all_groups,
    apply_nccl_environment,
)
from real.worker.stage_runner import HostBridge

from .conftest import REPO


# -- device per local rank ---------------------------------------------------------------
@given(st.integers(0, 15), st.integers(1, 8))
def test_nccl_gives_each_local_rank_its_own_device_or_refuses(local_rank, devices):
    if local_rank < devices:
        choice = select_device("auto", "auto", "real", local_rank, devices)
        assert (choice.kind, choice.index, choice.backend, choice.host_staged) == ("cuda", local_rank, "nccl", False)
    else:
        with pytest.raises(DeviceError, match="one CUDA device per rank"):
            select_device("cuda", "nccl", "real", local_rank, devices)


@given(st.integers(0, 15), st.integers(1, 8))
def test_gloo_shares_devices_round_robin_and_stages_through_the_host(local_rank, devices):
    choice = select_device("cuda", "gloo", "real", local_rank, devices)
    assert (choice.kind, choice.index, choice.backend) == ("cuda", local_rank % devices, "gloo")
    assert choice.host_staged and choice.name == f"cuda:{local_rank % devices}"


def test_without_cuda_workers_run_on_the_cpu_over_gloo_and_cuda_requests_fail():
    for compute in ("real", "emulated"):
        choice = select_device("auto", "auto", compute, 3, 0)
        assert (choice.name, choice.backend, choice.host_staged) == ("cpu", "gloo", False)
    assert select_device("auto", "auto", "emulated", 0, 2).name == "cpu", "emulated compute sleeps: CPU unless asked"
    with pytest.raises(DeviceError, match="CUDA is not available"):
        select_device("cuda", "auto", "real", 0, 0)
    with pytest.raises(DeviceError, match="needs CUDA"):
        select_device("cpu", "nccl", "real", 0, 4)
    with pytest.raises(DeviceError, match="unknown backend"):
        select_device("auto", "mpi", "real", 0, 1)


def test_the_config_checks_the_backend():
    assert RunConfig(backend="gloo", device="cuda").backend == "gloo"
    assert RunConfig.from_dict(RunConfig(backend="nccl").to_dict()).backend == "nccl"
    with pytest.raises(ConfigError, match="backend must be one of"):
        RunConfig(backend="mpi")
    with pytest.raises(ConfigError, match="needs device 'cuda'"):
        RunConfig(backend="nccl", device="cpu")


# -- NCCL settings, teardown by abort, the abort watch ------------------------------------
def test_nccl_environment_fills_in_defaults_and_keeps_the_users():
    environ = {"TORCH_NCCL_BLOCKING_WAIT": "0"}
    settings = apply_nccl_environment(environ)
    assert settings["TORCH_NCCL_BLOCKING_WAIT"] == "0", "a setting the user made wins"
    assert settings["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0" and settings["TORCH_NCCL_ENABLE_MONITORING"] == "0"
    assert set(settings) == set(NCCL_ENVIRONMENT) and environ == settings


def _single_rank_world(store, prefix):
    dist.init_process_group("gloo", store=dist.PrefixStore(prefix, store), rank=0, world_size=1)
    group = dist.new_group([0])
    t = torch.ones(3)
    dist.all_reduce(t, group=group)
    return group


def test_aborting_every_group_leaves_the_process_ready_for_the_next_generation():
    """The NCCL teardown (abort every group, then nothing to destroy), exercised on a
    one-rank gloo world: afterwards no group is left and a new world forms."""
    store = dist.HashStore()
    try:
        _single_rank_world(store, "gen0")
        abort_all_groups()
        assert not dist.is_initialized()
        abort_all_groups()  # idempotent
        _single_rank_world(store, "gen1")
        assert dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_generation_teardown_aborts_for_nccl_destroys_for_gloo_and_runs_once():
    from real.worker.groups import Generation

    store = dist.HashStore()
    try:
        for backend in ("nccl", "gloo"):
            _single_rank_world(store, f"gen-{backend}")
            generation = Generation(0, None, 0, backend, None, {})
            assert generation.aborts == (backend == "nccl")
            threads = [threading.Thread(target=generation.teardown) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(10)
            assert not dist.is_initialized() and not generation.alive
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_the_abort_watch_fires_once_the_key_appears_and_never_after_stop():
    store = dist.HashStore()
    fired = threading.Event()
    watch = AbortWatch(store, "gen3/resume", fired.set, interval_s=0.01).start()
    time.sleep(0.1)
    assert not fired.is_set()
    t0 = time.perf_counter()
    store.set("gen3/resume", "5")
    assert fired.wait(2.0), "the watch did not abort"
    assert time.perf_counter() - t0 < 1.0 and watch.fired
    watch.stop()
    calls = []
    quiet = AbortWatch(store, "gen4/resume", lambda: calls.append(1), interval_s=0.01).start()
    quiet.stop()
    store.set("gen4/resume", "1")
    time.sleep(0.1)
    assert calls == [] and not quiet.fired


def test_the_watch_straggles_once_when_the_main_thread_is_still_blocked_after_the_abort():
    store = dist.HashStore()
    store.set("gen5/resume", "2")
    notes = []
    watch = AbortWatch(store, "gen5/resume", lambda: None, interval_s=0.01,
                       straggle=lambda: notes.append(1) or {"resevered": 3}, straggle_after_s=0.2).start()  # fmt: skip
    deadline = time.time() + 5
    while watch.straggled is None and time.time() < deadline:
        time.sleep(0.02)
    watch.stop()
    assert watch.fired and watch.straggled == {"resevered": 3} and notes == [1]
    prompt = AbortWatch(store, "gen5/resume", lambda: None, interval_s=0.01,
                        straggle=lambda: notes.append(2) or {}, straggle_after_s=1.0).start()  # fmt: skip
    while not prompt.fired:
        time.sleep(0.01)
    prompt.stop()  # the main thread came out in time: no straggle
    time.sleep(0.05)
    assert prompt.straggled is None and notes == [1]


# -- host staging --------------------------------------------------------------------------
def _state(seed: int) -> LayerState:
    g = torch.Generator().manual_seed(seed)
    shapes = {"b": (3,), "w": (4, 2)}
    params = {n: torch.randn(*s, generator=g, dtype=torch.float64) for n, s in shapes.items()}
    avg = {n: torch.randn(*s, generator=g, dtype=torch.float64) for n, s in shapes.items()}
    sq = {n: torch.rand(*s, generator=g, dtype=torch.float64) for n, s in shapes.items()}
    return LayerState(2, 7, 7, params, avg, sq)


@given(st.integers(0, 1000))
def test_a_staged_state_equals_the_original_and_shares_no_memory(seed):
    state = _state(seed)
    staged = stage_state(state)
    assert (staged.layer, staged.ready_step, staged.adam_step) == (2, 7, 7)
    for group, copy in (
        (state.params, staged.params),
        (state.exp_avg, staged.exp_avg),
        (state.exp_avg_sq, staged.exp_avg_sq),
    ):
        for name, t in group.items():
            assert torch.equal(copy[name], t) and copy[name].device.type == "cpu"
            before = copy[name].clone()
            t.add_(1.0)  # training goes on in the source tensors
            assert torch.equal(copy[name], before), "the staged copy must not alias the live tensor"


def test_the_wire_on_the_cpu_is_the_tensor_and_round_trips():
    state = _state(1)
    flat = flatten(state)
    assert to_wire(flat, host_staged=True) is flat, "nothing to stage on the CPU"
    buffer = wire_buffer(flat.numel(), flat.dtype, torch.device("cpu"), host_staged=True)
    buffer.copy_(flat)
    back = unflatten(from_wire(buffer, torch.device("cpu")), state)
    assert all(torch.equal(back.params[n], state.params[n]) for n in state.params)
    assert host_copies({}) == {}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_states_stage_into_pinned_host_memory():
    state = _state(2)
    on_gpu = LayerState(
        2, 7, 7, *({n: t.cuda() for n, t in d.items()} for d in (state.params, state.exp_avg, state.exp_avg_sq))
    )
    staged = stage_state(on_gpu)
    assert all(t.is_pinned() and torch.equal(t, state.params[n]) for n, t in staged.params.items())
    wire = to_wire(flatten(on_gpu), host_staged=True)
    assert wire.is_pinned() and torch.equal(wire, flatten(state))


def test_the_host_bridge_computes_on_its_device_and_passes_gradients_back():
    torch.manual_seed(0)
    inner = torch.nn.Linear(3, 2).double()
    bridge = HostBridge(inner, torch.device("cpu"))
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    bridge(x).sum().backward()
    direct_x = x.detach().clone().requires_grad_(True)
    expected = torch.nn.functional.linear(direct_x, inner.weight.detach(), inner.bias.detach()).sum()
    expected.backward()
    assert torch.allclose(x.grad, direct_x.grad)
    assert inner.weight.grad is not None, "gradients reach the held module's parameters"
    # PipelineStage calls submod.to(stage device): the held layers must stay where they are
    assert list(bridge.parameters()) == []
    bridge.to(torch.float32)
    assert inner.weight.dtype == torch.float64 and bridge.inner is inner


# -- profiler timer, gpu_check without CUDA -------------------------------------------------
def test_the_cpu_timer_measures_wall_time():
    from real.launch.profiler import _median_time, time_once

    seconds = time_once(torch.device("cpu"))(lambda: time.sleep(0.02))
    assert 0.015 <= seconds < 0.5
    assert 0.015 <= _median_time(lambda: time.sleep(0.02), repeats=3, warmup=1, device=torch.device("cpu")) < 0.5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_cuda_timer_times_kernels_with_events():
    from real.launch.profiler import time_once

    a = torch.randn(2048, 2048, device="cuda")
    seconds = time_once(torch.device("cuda"))(lambda: a @ a)
    assert 0 < seconds < 1.0


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_gpu_check_exits_2_with_one_line_without_cuda():
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py")],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0], result.stderr


@pytest.mark.timeout(420)
def test_gpu_check_dry_runs_its_cpu_parts_on_the_cpu():
    """`--device cpu`: parts 1, 5 and 6 (4 ranks, a crash and a hang, a Hugging Face model
    through a crash) on the CPU with the GPU run's comparisons, 2-4 skipped in one line."""
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--steps", "6",
         "--hf", "hf:gpt2:tiny"],
        check=False, cwd=REPO, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    out = result.stdout
    assert result.returncode == 0 and "3 of 3 checks passed" in out, out + result.stderr[-2000:]
    parts = {line.split(".")[0].strip(): line for line in out.splitlines() if line.startswith("  ")}
    assert {"1", "5", "6", "2-4"} <= parts.keys(), out
    assert all(" ok: " in parts[p] for p in ("1", "5")) and "skipped" in parts["2-4"], out
    assert "recoveries" in parts["5"] and (" ok: " in parts["6"] or "skipped" in parts["6"]), out


def test_a_local_launcher_numbers_its_worker_slots_across_nodes_and_keeps_them():
    """One machine playing several nodes: every (node, GPU) slot gets its own local rank
    (its CUDA device), and a replacement process of a slot gets the same one."""
    from real.launch.local import LocalProcesses
    from real.protocol.secret import JobSecret

    processes = LocalProcesses("127.0.0.1:1", JobSecret.generate(), None)
    ranks = [processes.local_rank(f"node{n}", g) for n in range(3) for g in range(2)]
    assert ranks == list(range(6))
    assert processes.local_rank("node1", 1) == 3, "a replacement keeps its slot's device"
    assert processes.local_rank("late", 0) == 6, "a node that joins later gets the next one"
    assert [select_device("auto", "auto", "real", r, 6).index for r in ranks] == ranks
