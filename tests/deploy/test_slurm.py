"""deploy/slurm/ooblab.sbatch: its body runs a real (tiny) job under a stub `srun` that
starts each node's launcher as a local process, and its dry run prints commands that the
CLI's own parsers accept, with one secret file, unique node names and the allocation's
sizes."""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ooblab.cli import build_parser

from ..real.conftest import assert_no_leftovers

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy" / "slurm" / "ooblab.sbatch"
STUB = Path(__file__).with_name("stub_srun.py")


def _environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    srun = bin_dir / "srun"
    srun.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(STUB))} "$@"\n')
    srun.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OOBLAB"))}
    return {
        **env,
        "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}",
        "PYTHONPATH": str(REPO),
        "PYTHONUNBUFFERED": "1",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_SUBMIT_DIR": str(tmp_path),
        **extra,
    }


def _run(args: list[str], env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess:
    process = subprocess.Popen(
        ["bash", str(SCRIPT), *args],
        cwd=env["SLURM_SUBMIT_DIR"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"the batch script did not finish within {timeout_s} s:\n{out[-2000:]}\n{err[-3000:]}")
    finally:
        assert_no_leftovers(process.pid, wait_s=10.0)  # the script's session: srun steps, nodes, workers
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


@pytest.mark.timeout(240)
def test_the_batch_script_runs_a_job_under_a_stub_srun(tmp_path):
    pytest.importorskip("torch")
    job_dir = tmp_path / "job"
    env = _environment(
        tmp_path,
        OOBLAB=f"{shlex.quote(sys.executable)} -m ooblab.cli",
        OOBLAB_JOB_DIR=str(job_dir),
        OOBLAB_HOST="127.0.0.1",
        OOBLAB_GPUS_PER_NODE="1",
        OOBLAB_CONNECT_TIMEOUT="60",
    )
    done = _run(["--f", "1", "--steps", "3", "--threads", "1"], env, 200)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}\n" + "\n".join(
        p.read_text()[-1500:] for p in sorted(job_dir.rglob("*.log"))
    )
    summary = json.loads((job_dir / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and len(summary["losses"]) == 3
    assert sorted(n for p in summary["plan"]["pipelines"] for n in p["nodes"]) == ["node0", "node1"]
    assert "status finished" in done.stdout and f"results in {job_dir / 'run'}" in done.stdout
    assert sorted(p.name for p in (job_dir / "nodes").iterdir()) == ["node-0.log", "node-1.log"]
    # the secret: in one file only the job's user can read, in a directory only it can enter
    assert stat.S_IMODE((job_dir / "secret").stat().st_mode) == 0o600
    assert stat.S_IMODE(job_dir.stat().st_mode) == 0o700
    secret = (job_dir / "secret").read_text().strip()
    assert len(secret) == 64
    for path in job_dir.rglob("*"):
        if path.is_file() and path.name != "secret":
            assert secret not in path.read_text(errors="replace"), path
    assert secret not in done.stdout + done.stderr


def _dry_run(tmp_path: Path, *args: str) -> tuple[list[list[str]], list[str]]:
    env = _environment(tmp_path, OOBLAB_GPUS_PER_NODE="4", OOBLAB_HOST="10.0.0.5", SLURM_JOB_NUM_NODES="3")
    done = _run(["--dry-run", *args], env, 30)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    commands = [shlex.split(line) for line in lines if not line.startswith("#")]
    return commands, [line for line in lines if line.startswith("# node ")]


def test_the_dry_run_prints_commands_the_cli_accepts(tmp_path):
    commands, node_lines = _dry_run(tmp_path, "--f", "1", "--steps", "7")
    assert [c[:2] for c in commands] == [["ooblab", "coordinator"], ["srun", "--nodes"]]
    coord = build_parser(["coordinator"]).parse_args(commands[0][1:])
    job_dir = tmp_path / "results" / "slurm" / "4242"
    assert (coord.nodes, coord.gpus_per_node, coord.f, coord.steps) == (3, 4, 1, 7)
    assert (coord.host, coord.advertise, coord.port) == ("10.0.0.5", "10.0.0.5", 0)
    assert (coord.secret_file, coord.out) == (str(job_dir / "secret"), str(job_dir / "run"))
    assert coord.address_file == str(job_dir / "coordinator.addr")

    # what each node runs: the srun line's own `bash -c` command, expanded as a task would
    srun = commands[1]
    script, positional = srun[srun.index("-c") + 1], srun[srun.index("-c") + 2 :]
    names = []
    for node, line in enumerate(node_lines):
        env = {"PATH": os.environ["PATH"], "OOBLAB": "echo", "SLURM_NODEID": str(node)}
        expanded = subprocess.run(["bash", "-c", script, *positional], env=env, capture_output=True, text=True)
        argv = shlex.split(expanded.stdout)
        assert argv == shlex.split(line.split(" runs: ", 1)[1])[1:]  # the printed line is the same command
        args = build_parser(["node"]).parse_args(argv)
        assert (args.coordinator, args.secret_file, args.gpus) == ("HOST:PORT", coord.secret_file, coord.gpus_per_node)
        names.append(args.name)
    assert names == ["node0", "node1", "node2"]
    nodes = int(srun[srun.index("--nodes") + 1])
    assert nodes == int(srun[srun.index("--ntasks") + 1]) == coord.nodes
    assert not (tmp_path / "results").exists()  # a dry run starts and creates nothing


def test_options_the_script_owns_are_refused(tmp_path):
    env = _environment(tmp_path)
    for option in ("--nodes=3", "--secret-file", "--out"):
        done = _run(["--dry-run", "--f", "1", option, "x"], env, 30)
        assert done.returncode == 2 and "is set by the batch script" in done.stderr
    env.pop("SLURM_JOB_ID")
    done = _run(["--f", "1"], env, 30)
    assert done.returncode == 2 and "not inside a Slurm job" in done.stderr
