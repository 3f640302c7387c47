"""deploy/kubernetes/ooblab-jobset.yaml agrees with the CLI: its command lines parse with
the real `ooblab coordinator` and `ooblab node` parsers, the sizes, port and addresses
match across the pods, and the secret comes from one Kubernetes Secret into the variable
the launchers read; the coordinator's `--use-secret` (which the manifest relies on) uses
the given secret and writes none."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ooblab.cli import build_parser
from real.protocol.secret import SECRET_ENV, JobSecret

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "deploy" / "kubernetes" / "ooblab-jobset.yaml"
_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _documents() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(MANIFEST.read_text())}


def _replicated(jobset: dict) -> dict[str, dict]:
    return {rj["name"]: rj for rj in jobset["spec"]["replicatedJobs"]}


def _container(replicated_job: dict) -> dict:
    (container,) = replicated_job["template"]["spec"]["template"]["spec"]["containers"]
    return container


def _argv(container: dict, values: dict[str, str]) -> list[str]:
    """The container's command line as Kubernetes expands it: $(VAR) from its own env."""
    declared = {e["name"] for e in container.get("env", [])}
    words = [*container["command"], *container["args"]]
    for word in words:
        assert set(_REF.findall(word)) <= declared, f"{word!r} refers to a variable the container does not declare"
    return [_REF.sub(lambda m: values[m.group(1)], word) for word in words]


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e.get("valueFrom", {"value": e.get("value")}) for e in container.get("env", [])}


def test_the_manifest_agrees_with_the_cli():
    docs = _documents()
    jobset = docs["JobSet"]
    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    name, subdomain = jobset["metadata"]["name"], jobset["spec"]["network"]["subdomain"]
    jobs = _replicated(jobset)
    coordinator_c, node_c = _container(jobs["coordinator"]), _container(jobs["workers"])

    assert coordinator_c["command"][:2] == ["ooblab", "coordinator"] and node_c["command"][:2] == ["ooblab", "node"]
    coordinator = build_parser(["coordinator"]).parse_args(_argv(coordinator_c, {"POD_IP": "10.1.2.3"})[1:])
    assert _env(coordinator_c)["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert coordinator.host == "10.1.2.3"  # the pod's own address, not every interface

    # one coordinator pod, whose stable DNS name and port the launchers use
    assert jobs["coordinator"]["replicas"] == 1 and jobs["coordinator"]["template"]["spec"]["parallelism"] == 1
    (port,) = coordinator_c["ports"]
    assert port["containerPort"] == coordinator.port > 0
    pod_dns = f"{name}-coordinator-0-0.{subdomain}"
    assert coordinator.advertise == pod_dns

    workers = jobs["workers"]["template"]["spec"]
    assert jobs["workers"]["replicas"] == 1 and workers["completionMode"] == "Indexed"
    assert workers["parallelism"] == workers["completions"] == coordinator.nodes
    index = _env(node_c)["NODE_INDEX"]["fieldRef"]["fieldPath"]
    assert index == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    names = []
    for i in range(coordinator.nodes):
        node = build_parser(["node"]).parse_args(_argv(node_c, {"NODE_INDEX": str(i)})[1:])
        assert node.coordinator == f"{pod_dns}:{coordinator.port}"
        assert node.gpus == coordinator.gpus_per_node == node_c["resources"]["limits"]["nvidia.com/gpu"]
        assert node.secret_file is None  # so the launcher reads $OOBLAB_SECRET
        names.append(node.name)
    assert len(set(names)) == coordinator.nodes

    # the secret: one Kubernetes Secret, in the variable the CLI reads, never on a command line
    assert coordinator.use_secret and coordinator.secret_file is None
    refs = {
        _env(c)[SECRET_ENV]["secretKeyRef"]["name"] + "/" + _env(c)[SECRET_ENV]["secretKeyRef"]["key"]
        for c in (coordinator_c, node_c)
    }
    assert len(refs) == 1
    secret_name, key = refs.pop().split("/")
    assert f"kubectl create secret generic {secret_name} --from-literal={key}=" in MANIFEST.read_text()
    assert not any(
        "secret" in word.lower() and "=" in word and "use-secret" not in word
        for word in coordinator_c["args"] + node_c["args"]
    )

    # the job ends with the coordinator; a lost worker pod is replaced, not the whole set restarted
    assert jobset["spec"]["successPolicy"]["targetReplicatedJobs"] == ["coordinator"]
    assert jobset["spec"]["failurePolicy"]["maxRestarts"] == 0 and workers["backoffLimit"] > 0
    # only the job's pods reach the job's pods
    policy = docs["NetworkPolicy"]["spec"]
    label = {"jobset.sigs.k8s.io/jobset-name": name}
    assert policy["podSelector"]["matchLabels"] == label
    assert [peer["podSelector"]["matchLabels"] for rule in policy["ingress"] for peer in rule["from"]] == [label]


def _coordinator(tmp_path: Path, secret_hex: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", SECRET_ENV: secret_hex}
    return subprocess.Popen(
        [sys.executable, "-m", "ooblab.cli", "coordinator", "--nodes", "2", "--f", "1", "--steps", "3", "--use-secret",
         "--address-file", str(tmp_path / "addr"), "--out", str(tmp_path / "run")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


@pytest.mark.timeout(120)
def test_the_coordinator_uses_the_given_secret(tmp_path):
    pytest.importorskip("torch")
    from real.protocol.errors import SecretError
    from real.protocol.transport import connect

    given = JobSecret.generate()
    process = _coordinator(tmp_path, given.hex)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "addr").exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        address = (tmp_path / "addr").read_text().strip()
        connect(address, given, 10)  # accepted: the coordinator holds this secret
        with pytest.raises(SecretError, match="refused this job secret"):
            connect(address, JobSecret.generate(), 10)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert f"using the job's secret from ${SECRET_ENV}" in err and given.hex not in err
    assert not list(tmp_path.rglob("secret"))  # given, so not written anywhere

    bad = _coordinator(tmp_path, "not-a-secret")
    _, err = bad.communicate(timeout=60)
    assert bad.returncode == 2 and err.strip().count("\n") == 0
    assert f"${SECRET_ENV} does not hold a job secret" in err
