"""Launching: the multi-machine path exercised locally, failures, and leftover processes.

Every test runs its processes in their own sessions with timeouts and checks that none
outlives the test (`conftest.finish`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from .conftest import REPO, finish, ooblab, reap, session_processes, start


def wait_for_file(path, timeout_s: float) -> str:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if path.exists():
            return path.read_text().strip()
        time.sleep(0.1)
    raise AssertionError(f"{path} did not appear within {timeout_s} s")


@pytest.mark.timeout(200)
def test_coordinator_with_a_node_launcher_and_torchrun(tmp_path):
    """Two "machines": one per-node launcher (`ooblab node`) and one torchrun supervisor
    (`--max-restarts 0`) running `ooblab worker`, both connecting to a coordinator's
    published address; 2 nodes x 2 GPUs."""
    address_file = tmp_path / "address"
    coordinator = start([
        "coordinator", "--nodes", "2", "--gpus-per-node", "2", "--f", "1", "--steps", "3",
        "--host", "127.0.0.1", "--advertise", "127.0.0.1", "--address-file", str(address_file),
        "--secret-file", str(tmp_path / "secret"), "--threads", "1", "--out", str(tmp_path / "run"), "--json",
    ])  # fmt: skip
    secret = ["--secret-file", str(tmp_path / "secret")]
    launchers = []
    try:
        address = wait_for_file(address_file, 60)
        assert address.startswith("127.0.0.1:") and int(address.rsplit(":", 1)[1]) > 0
        launchers.append(
            start(["node", "--coordinator", address, "--name", "hostA", "--gpus", "2", "--threads", "1", *secret])
        )
        torchrun = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc-per-node", "2",
            "--max-restarts", "0", "-m", "ooblab.cli", "worker", "--coordinator", address, "--name", "hostB", "--threads", "1", *secret,
        ]  # fmt: skip
        launchers.append(
            subprocess.Popen(
                torchrun, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
            )
        )
        for launcher in launchers:
            done = finish(launcher, 150)
            assert done.returncode == 0, done.stderr[-3000:]
        result = finish(coordinator, 60)
    finally:
        reap(coordinator, *launchers)
    summary = result.json()
    assert result.returncode == 0 and summary["status"] == "finished", summary["reason"]
    assert len(summary["losses"]) == 3 and summary["world_size"] == 4
    nodes = sorted(node for p in summary["plan"]["pipelines"] for node in p["nodes"])
    assert nodes == ["hostA", "hostB"]
    for name in ("config.json", "summary.json", "timeline.csv", "events.jsonl"):
        assert (tmp_path / "run" / name).is_file()


def read_until(stream, marker: str, timeout_s: float) -> str:
    """Lines of `stream` up to the first containing `marker` (fails after timeout_s)."""
    deadline, seen = time.time() + timeout_s, []
    while time.time() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError(f"{marker!r} not seen:\n{''.join(seen)[-3000:]}")


def worker_pids(launcher_pid: int) -> list[int]:
    return [
        pid
        for pid in session_processes(launcher_pid)
        if pid != launcher_pid and b"spawn_main" in open(f"/proc/{pid}/cmdline", "rb").read()
    ]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("how", ["kill", "hang"])
def test_a_worker_killed_or_frozen_by_hand_is_survived(tmp_path, how):
    """A worker killed from outside mid-training (exit status) or frozen (missed
    heartbeats, then fenced) is survived by a live reconfiguration; every process exits."""
    process = start([
        "run", "--nodes", "3", "--f", "1", "--pipelines", "1,2", "--steps", "80",
        "--heartbeat-timeout", "2", "--heartbeat-interval", "0.25", "--timeout", "20", "--out", str(tmp_path / "run"), "--json",
    ])  # fmt: skip
    try:
        read_until(process.stderr, "training_started", 90)
        time.sleep(0.5)
        victims = worker_pids(process.pid)
        assert len(victims) == 3
        os.kill(victims[-1], signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        result = finish(process, 90)
    finally:
        reap(process)
    summary = result.json()
    assert result.returncode == 0 and summary["status"] == "finished", summary["reason"]
    assert (
        summary["num_iterations"] == 80 and summary["num_reconfigurations"] == 1 and summary["failures_survived"] == 1
    )
    assert len(summary["recovery_s"]) == 1 and summary["num_restarts"] == 0
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    lost = [e for e in events if e["kind"] == "worker_lost"]
    expected = "exited with status -9" if how == "kill" else "missed heartbeats"
    assert len(lost) == 1 and expected in lost[0]["reason"]


@pytest.mark.timeout(200)
def test_a_frozen_worker_on_another_machine_is_fenced_by_its_node_launcher(tmp_path):
    """Multi-machine path: the coordinator cannot signal remote processes, so it fences a
    silent worker through the store; that node's launcher (`ooblab node`) kills it, and
    the job reconfigures onto the other two nodes."""
    address_file = tmp_path / "address"
    coordinator = start([
        "coordinator", "--nodes", "3", "--f", "1", "--steps", "80", "--host", "127.0.0.1", "--advertise", "127.0.0.1",
        "--address-file", str(address_file), "--threads", "1", "--heartbeat-timeout", "2", "--heartbeat-interval", "0.25",
        "--timeout", "20", "--out", str(tmp_path / "run"), "--json",
    ])  # fmt: skip
    secret = ["--secret-file", str(tmp_path / "run" / "secret")]
    launchers = {}
    try:
        address = wait_for_file(address_file, 60)
        for name in ("hostA", "hostB", "hostC"):
            launchers[name] = start(["node", "--coordinator", address, "--name", name, "--threads", "1", *secret])
        read_until(coordinator.stderr, "training_started", 120)
        time.sleep(0.5)
        (victim,) = worker_pids(launchers["hostC"].pid)
        os.kill(victim, signal.SIGSTOP)
        done = {name: finish(process, 120) for name, process in launchers.items()}
        result = finish(coordinator, 60)
    finally:
        reap(coordinator, *launchers.values())
    summary = result.json()
    assert result.returncode == 0 and summary["status"] == "finished", summary["reason"]
    assert summary["num_iterations"] == 80 and summary["num_reconfigurations"] == 1
    assert done["hostA"].returncode == 0 and done["hostB"].returncode == 0, (done["hostA"].stderr, done["hostB"].stderr)
    assert done["hostC"].returncode == 1 and "was fenced by the coordinator and killed" in done["hostC"].stderr
    nodes = sorted(node for p in summary["plan"]["pipelines"] for node in p["nodes"])
    assert nodes == ["hostA", "hostB"]


@pytest.mark.timeout(120)
def test_a_job_with_no_node_left_fails_cleanly(tmp_path):
    """Killing the only worker leaves nothing to train on: the job waits for nodes, then
    fails with that reason; every process exits."""
    process = start([
        "run", "--nodes", "1", "--f", "0", "--steps", "100000", "--wait-for-nodes", "2", "--out", str(tmp_path / "run"), "--json",
    ])  # fmt: skip
    try:
        read_until(process.stderr, "training_started", 90)
        victims = worker_pids(process.pid)
        assert len(victims) == 1
        os.kill(victims[0], signal.SIGKILL)
        result = finish(process, 60)
    finally:
        reap(process)
    summary = result.json()
    assert result.returncode == 1 and summary["status"] == "failed"
    assert "waited 2 s for nodes" in summary["reason"]
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert events[-1]["kind"] == "failed" and any(e["kind"] == "waiting_for_nodes" for e in events)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_launcher_takes_its_workers_with_it(tmp_path, sig):
    """SIGTERM: the launcher reaps its workers on the way out. SIGKILL: it cannot, the
    workers' parent-death signal ends them. Either way nothing is left."""
    process = start(["run", "--nodes", "2", "--f", "1", "--steps", "100000", "--out", str(tmp_path / "run")])
    try:
        read_until(process.stderr, "training_started", 90)
        assert len(worker_pids(process.pid)) == 2
        process.send_signal(sig)
        process.communicate(timeout=30)
        assert process.returncode == -sig if sig == signal.SIGKILL else process.returncode == 128 + sig
    finally:
        reap(process)


@pytest.mark.timeout(120)
def test_a_worker_error_is_reported_by_the_coordinator(tmp_path):
    """Workers that cannot start (CUDA asked for on a machine without it) report their
    traceback; the run fails with it instead of hanging."""
    if __import__("torch").cuda.is_available():
        pytest.skip("this machine has CUDA")
    result = ooblab(
        [
            "run",
            "--nodes",
            "2",
            "--f",
            "1",
            "--steps",
            "2",
            "--device",
            "cuda",
            "--out",
            str(tmp_path / "run"),
            "--json",
        ],
        90,
    )
    summary = result.json()
    assert result.returncode == 1 and summary["status"] == "failed"
    assert "CUDA is not available" in summary["reason"]


def _exit_with(code: int) -> None:
    os._exit(code)


def _wait_forever() -> None:
    time.sleep(600)


@pytest.mark.timeout(60)
def test_a_launcher_names_each_worker_that_did_not_end_cleanly():
    """The node launcher's status is the worst worker status; the line it prints must say
    which worker and why (status, signal, or fenced), and nothing for a clean exit."""
    import multiprocessing as mp

    from real.launch.local import worker_exit_line

    ctx = mp.get_context("spawn")
    clean = ctx.Process(target=_exit_with, args=(0,), name="hostA/gpu0")
    failed = ctx.Process(target=_exit_with, args=(3,), name="hostA/gpu1")
    killed = ctx.Process(target=_wait_forever, name="hostB/gpu0")
    processes = (clean, failed, killed)
    try:
        for process in processes:
            process.start()
        clean.join(30)
        failed.join(30)
        assert killed.pid is not None
        os.kill(killed.pid, signal.SIGKILL)
        killed.join(30)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
    assert worker_exit_line(clean) is None
    assert worker_exit_line(failed) == f"worker hostA/gpu1 (pid {failed.pid}) exited with status 3"
    assert worker_exit_line(killed) == f"worker hostB/gpu0 (pid {killed.pid}) was killed by SIGKILL"
    assert worker_exit_line(killed, fenced=True).endswith("was fenced by the coordinator and killed")


def test_a_worker_that_cannot_be_started_is_the_error_and_the_store_is_closed(tmp_path, monkeypatch):
    """A spawn failing before the coordinator runs (out of processes, say) reaches the
    caller as itself, and once the job is gone nothing listens on its port."""
    import gc
    import socket

    from real.config import RunConfig
    from real.launch import local

    addresses = []

    class Recorded(local.Coordinator):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            addresses.append(self.address)

    def refuse(self, node, gpu):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(local, "Coordinator", Recorded)
    monkeypatch.setattr(local.LocalProcesses, "spawn", refuse)
    with pytest.raises(OSError, match="Resource temporarily unavailable") as caught:
        local.run_local(RunConfig(nodes=2, fault_tolerance=1, steps=2), tmp_path / "run")
    del caught  # its traceback holds the coordinator
    gc.collect()
    host, port = addresses[0].rsplit(":", 1)
    with pytest.raises(OSError), socket.create_connection((host, int(port)), timeout=2):
        pass
