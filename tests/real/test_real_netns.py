"""Jobs across hosts of their own: network namespaces on one bridge, and the network's faults.

Each test makes a `NetCluster` (hosts with their own addresses, joined by a bridge that has
no address outside them), starts the coordinator and the nodes there with the commands the
Slurm recipe prints, and checks the trained model against the single-process reference
(float64). Skipped, with the reason, where namespaces cannot be made (not root, no iproute2).
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import time

import pytest

from real.config import RunConfig
from real.launch.netns import NetCluster, unavailable
from real.launch.netns_job import NetJob
from real.models.reference import gather_params, max_relative_difference, train_reference

from .conftest import assert_no_leftovers

REASON = unavailable()
pytestmark = [
    pytest.mark.skipif(REASON is not None, reason=f"namespace hosts: {REASON}"),
    pytest.mark.xdist_group("netns"),
]

HEARTBEAT_TIMEOUT_S = 3.0
FAST = ["--timeout", "20", "--heartbeat-timeout", str(HEARTBEAT_TIMEOUT_S), "--heartbeat-interval", "0.25"]


def training_job(
    net_cluster, tmp_path, steps: int, hosts: int = 5, params=None, inject: str | None = None
) -> tuple[NetCluster, NetJob, str]:
    """4 nodes as 2 pipelines of 2 (f = 1, float64) on namespace hosts, the coordinator on
    host 0: started, and training. (cluster, job, the coordinator's address)."""
    args = ["--f", "1", "--steps", str(steps), "--global-batch", "16", "--dtype", "float64", "--pipelines", "2,2",
            *FAST, "--json", *(["--save-params", str(params)] if params is not None else []),
            *(["--inject", inject] if inject else [])]  # fmt: skip
    cluster = net_cluster(hosts)
    job = NetJob(cluster, tmp_path / "job", 4, args)
    address = job.start()
    job.wait_for("training_started", timeout_s=90)
    return cluster, job, address


def reference_run(steps: int):
    """The single-process run over the same batches: the oracle."""
    return train_reference(RunConfig(nodes=4, fault_tolerance=1, steps=steps, global_batch=16, dtype="float64"))


@pytest.fixture
def net_cluster():
    """A factory of namespace clusters; each is torn down after the test, pass or fail, and
    nothing of it may be left (namespaces, links, processes)."""
    made: list[NetCluster] = []

    def make(hosts: int) -> NetCluster:
        made.append(NetCluster(hosts))
        return made[-1]

    yield make
    for cluster in made:
        pids = [p.pid for p in cluster.processes]
        cluster.close()
        assert cluster.leftovers() == [], f"left behind: {cluster.leftovers()}"
        for pid in pids:
            assert_no_leftovers(pid)


def _reach(cluster: NetCluster, src: int, dst: int, port: int) -> bool:
    """Whether a TCP connection from host `src` to a listener on host `dst` gets through."""
    code = (
        "import socket,sys\n"
        f"s=socket.socket(); s.bind(('{cluster.hosts[dst].address}', {port})); s.listen(); s.settimeout(4)\n"
        "try: s.accept(); print('ok')\n"
        "except OSError: print('none')\n"
    )
    server = cluster.start(dst, [sys.executable, "-c", code])
    time.sleep(0.3)
    client = cluster.start(
        src,
        [
            sys.executable,
            "-c",
            f"import socket; socket.create_connection(('{cluster.hosts[dst].address}', {port}), timeout=2)",
        ],
    )
    client.wait(timeout=10)
    out, _ = server.communicate(timeout=10)
    return out.strip() == "ok"


@pytest.mark.timeout(60)
def test_hosts_have_their_own_addresses_and_a_cut_link_isolates_one(net_cluster):
    cluster = net_cluster(3)
    addresses = [h.address for h in cluster.hosts]
    assert len(set(addresses)) == 3 and all(
        a not in socket.gethostbyname_ex(socket.gethostname())[2] for a in addresses
    )
    assert _reach(cluster, 1, 0, 5001)
    cluster.cut(1)
    assert not _reach(cluster, 1, 0, 5002) and _reach(cluster, 2, 0, 5003)  # only host 1 is cut off
    cluster.restore(1)
    assert _reach(cluster, 1, 0, 5004)
    cluster.slow(2, 800)
    assert _reach(cluster, 2, 0, 5005)  # shaped, not cut
    cluster.close()
    assert cluster.leftovers() == []


@pytest.mark.timeout(300)
def test_a_cut_link_is_survived_exactly_and_when_restored_its_node_is_fenced(net_cluster, tmp_path):
    """4 nodes as 2 pipelines of 2 (f = 1): `--inject 1:node2:netdown` cuts node2's link
    while step 1 runs (its process lives on, unreachable): the coordinator declares it lost
    within the heartbeat bound and the job reconfigures live on the 3 others. The link
    comes back at step 5 (`netup`): node2's worker, alive in the old generation all along,
    learns it is fenced and stops; it commits no step and writes nothing, and its launcher
    ends by itself. A new launcher on that host then rejoins as a new member, taken in at
    an iteration boundary. Every loss and every parameter equals the single-process
    reference."""
    steps = 20
    params = tmp_path / "params"
    cluster, job, _ = training_job(net_cluster, tmp_path, steps, params=params, inject="1:node2:netdown,5:node2:netup")
    job.launchers[2].wait(timeout=120)  # fenced: it ends without anyone killing it
    job.relaunch(2)
    code, summary = job.finish(timeout_s=180)
    assert code == 0 and summary.get("status") == "finished", job.tail()
    assert [r.kind for _, r in job.link_actions] == ["netdown", "netup"] and not job.link_errors
    assert summary["failures_survived"] == 1 and summary["num_restarts"] == 0
    recovery = summary["recoveries"][0]
    assert recovery["nodes"] == ["node2"] and recovery["kind"] == "live"
    assert recovery["detection_s"] <= HEARTBEAT_TIMEOUT_S + 2.0, (
        f"the cut was noticed after {recovery['detection_s']} s"
    )
    log = (tmp_path / "job" / "nodes" / "node-2.log").read_text()
    assert "fence" in log, log[-2000:]  # its launcher killed it on the fence, or it read the fence itself
    assert "node2" in {n for p in summary["plan"]["pipelines"] for n in p["nodes"]}, job.tail()
    assert summary["num_reconfigurations"] == 2, job.tail()  # the loss, then the join
    reference = reference_run(steps)
    assert summary["losses"] == pytest.approx(reference.losses, rel=1e-12)
    replicas = gather_params(params)
    assert len(replicas) >= 2
    assert max(max_relative_difference(p, reference.params) for p in replicas.values()) <= 1e-9


@pytest.mark.timeout(300)
def test_a_slowed_link_makes_a_straggler_not_a_failure(tmp_path):
    """Through `ooblab netns`: node2's link slowed to 2 Mbit/s both ways from step 2 to
    step 4 (`slow`, `netup`). The backend does not treat a straggler as a failure (its
    heartbeats still arrive well within the timeout) and has no straggler mitigation:
    every step waits for it and takes several times longer while the link is slow (over
    1.5x the median of the other steps: under load every step is slower), then the pace
    comes back. Nobody is lost, the losses equal the reference, the command
    said what it carried out, and it left no namespace or link behind."""
    steps = 7
    job_args = ["--f", "1", "--steps", str(steps), "--global-batch", "16", "--dtype", "float64",
                "--pipelines", "2,2", *FAST, "--inject", "2:node2:slow:2000,4:node2:netup"]  # fmt: skip
    out = tmp_path / "job"
    command = [sys.executable, "-m", "ooblab.cli", "netns", "--nodes", "4", "--out", str(out), "--", *job_args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = process.communicate(timeout=240)
    finally:
        process.kill()
    assert process.returncode == 0, output[-3000:]
    assert "carried out --inject slow node2 step 2 to 2000 kbit/s" in output, output[-3000:]
    assert "carried out --inject netup node2 step 4" in output, output[-3000:]
    prefix = f"ob{process.pid % 100000}a"
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert not [n for n in names if n.startswith(prefix)] and f" {prefix}br" not in links
    summary = json.loads((out / "run" / "summary.json").read_text())
    assert summary["failures_survived"] == 0 and summary["num_reconfigurations"] == 0, output[-3000:]
    times = summary["iteration_times_s"]  # a loaded machine slows every step, so compare medians
    slowed, others = times[2:4], times[:2] + times[4:]
    assert min(slowed) > 1.5 * statistics.median(others), times
    reference = reference_run(steps)
    assert summary["losses"] == pytest.approx(reference.losses, rel=1e-12)


@pytest.mark.timeout(300)
def test_a_link_cut_during_a_recovery_is_survived_exactly(net_cluster, tmp_path):
    """node1 crashes at step 2's forward, and node2's link is cut the moment the
    coordinator begins that recovery (`2:node2:netdown:recovery`): one recovery handles
    both losses. Each pipeline keeps one of its two stages (node0's in one, node3's in
    the other), so every layer still has a copy and the job reconfigures live onto
    node0 and node3; the losses equal the reference."""
    steps = 6
    _, job, _ = training_job(net_cluster, tmp_path, steps, inject="2:node1:crash:forward,2:node2:netdown:recovery")
    code, summary = job.finish(timeout_s=240)
    assert code == 0 and summary.get("status") == "finished", job.tail()
    assert [r.kind for _, r in job.link_actions] == ["netdown"] and not job.link_errors
    (recovery,) = summary["recoveries"]
    assert sorted(recovery["nodes"]) == ["node1", "node2"] and recovery["kind"] == "live", recovery
    assert {n for p in summary["plan"]["pipelines"] for n in p["nodes"]} == {"node0", "node3"}
    reference = reference_run(steps)
    assert summary["losses"] == pytest.approx(reference.losses, rel=1e-12)


@pytest.mark.timeout(300)
def test_the_coordinators_link_cut_briefly_is_ridden_out(net_cluster, tmp_path):
    """The coordinator's own link is cut twice while the job trains: for less than the
    heartbeat timeout (3 s), then for twice it. The workers' store traffic waits and
    resumes (TCP retransmits); the longer cut silences every worker together, which the
    coordinator waits out (up to the group timeout) instead of declaring the whole cluster
    lost, also for a worker whose beats come back seconds after the others'; nobody is
    lost and the job finishes exactly."""
    steps = 14
    cluster, job, _ = training_job(net_cluster, tmp_path, steps)
    for cut_s in (1.0, 2 * HEARTBEAT_TIMEOUT_S):
        time.sleep(0.5 if cut_s < HEARTBEAT_TIMEOUT_S else 3.0)
        cluster.cut(0)
        time.sleep(cut_s)
        cluster.restore(0)
    code, summary = job.finish(timeout_s=180)
    assert code == 0 and summary.get("status") == "finished", job.tail()
    assert summary["failures_survived"] == 0 and summary["num_reconfigurations"] == 0, job.tail()
    assert "all_workers_silent" in job.log.read_text(), job.tail()
    reference = reference_run(steps)
    assert summary["losses"] == pytest.approx(reference.losses, rel=1e-12)


ATTACKER = r"""
import json, os, socket, sys, time
from datetime import timedelta
import torch.distributed as dist
from real.protocol import gate, transport
from real.protocol.secret import JobSecret
host, port = sys.argv[1], int(sys.argv[2])
out = {}
try:  # a client with a secret of its own
    transport.connect(f"{host}:{port}", JobSecret.generate(), 10)
    out["wrong_secret"] = "admitted"
except Exception as exc:
    out["wrong_secret"] = f"{type(exc).__name__}: {exc}"
try:  # torch's own client, straight at the port: list, then abort the job
    raw = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=2))
    out["list_keys"] = raw.list_keys()
    raw.set("abort", "1")
except Exception as exc:
    out["list_keys"] = f"refused: {type(exc).__name__}"
s = socket.create_connection((host, port), timeout=6)  # a replayed or guessed answer
greeting = s.recv(64)
s.sendall(JobSecret.generate().gate_answer(greeting[len(gate.MAGIC):]))
out["guessed_answer"] = s.recv(1).hex()
held = [socket.create_connection((host, port), timeout=6) for _ in range(40)]  # hold the door
time.sleep(float(sys.argv[3]))
out["held"] = len(held)
print(json.dumps(out))
"""


@pytest.mark.timeout(300)
def test_an_attacker_on_the_network_gets_nothing_and_stalls_nothing(net_cluster, tmp_path):
    """A host of the job's network without the secret tries, during training: a client with
    its own secret (refused at the gate's challenge), torch's own client straight at the
    port to list the job's keys and set `abort` (it never reaches the store), a guessed
    answer to the challenge (refused), and 40 connections held open for the rest of the
    job. The job finishes with nobody lost and every loss equal to the reference."""
    # long enough that the attacker's probes, slow on a loaded machine, all land in training
    # (8 steps were over before its last probe once: a refused connection, no report)
    steps = 14
    cluster, job, address = training_job(net_cluster, tmp_path, steps, hosts=6)
    host, port = address.rsplit(":", 1)
    attacker = cluster.start(5, [sys.executable, "-c", ATTACKER, host, port, "8"])
    code, summary = job.finish(timeout_s=180)
    out, err = attacker.communicate(timeout=60)
    assert code == 0 and summary.get("status") == "finished", job.tail()
    seen = json.loads(out.strip().splitlines()[-1]) if out.strip() else pytest.fail(err[-3000:])
    assert seen["wrong_secret"].startswith("SecretError") and "refused this job secret" in seen["wrong_secret"]
    assert str(seen["list_keys"]).startswith("refused"), seen
    assert seen["guessed_answer"] == "00" and seen["held"] == 40
    assert summary["failures_survived"] == 0 and summary["num_reconfigurations"] == 0
    reference = reference_run(steps)
    assert summary["losses"] == pytest.approx(reference.losses, rel=1e-12)
