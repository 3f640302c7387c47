"""Exposure and errors of the real backend: where the store and
gloo listen, the per-job secret, refused registrations, bounded waits, one-line errors.

Listening sockets are read from /proc/net/tcp{,6} and matched to a process through the
socket inodes of /proc/<pid>/fd (Linux only; skipped elsewhere).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")
import torch.distributed as dist

from ooblab.cli import main
from planner.errors import ProfileError
from real.config import RunConfig
from real.control.membership import Membership, WorkerRecord
from real.control.planning import check_profile_files, resolve_run_profile
from real.protocol import (
    keys,
    transport,
)
from real.protocol import rendezvous as rv
from real.protocol.commit import StepTimeout, wait_verdict
from real.protocol.errors import ConnectError, ListenError
from real.protocol.secret import (
    JobSecret,
    SecretError,
    load_secret,
    read_secret_file,
    write_secret_file,
)

from .conftest import finish, reap, session_processes, start

LINUX = sys.platform.startswith("linux") and Path("/proc/net/tcp").exists()


# -- listening sockets of a process --------------------------------------------------------
def _listening_by_inode() -> dict[int, tuple[str, int]]:
    """inode -> (address, port) of every TCP socket in LISTEN state on this machine."""
    out = {}
    for name, width in (("tcp", 4), ("tcp6", 16)):
        path = Path("/proc/net") / name
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if state != "0A":  # TCP_LISTEN
                continue
            hex_addr, hex_port = local.split(":")
            raw = bytes.fromhex(hex_addr)
            if width == 4:
                address = socket.inet_ntop(socket.AF_INET, raw[::-1])
            else:  # four little-endian 32-bit words
                address = socket.inet_ntop(socket.AF_INET6, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))
            out[inode] = (address, int(hex_port, 16))
    return out


def listening_sockets(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket process `pid` holds."""
    listening = _listening_by_inode()
    found = []
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return []
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inode = int(target[8:-1])
            if inode in listening:
                found.append(listening[inode])
    return found


def _loopback(address: str) -> bool:
    return address.startswith("127.") or address in ("::1", "::ffff:127.0.0.1")


# -- the secret ----------------------------------------------------------------------------
def test_derived_values_differ_and_the_secret_never_shows():
    a, b = JobSecret.generate(), JobSecret.generate()
    assert a != b and a.key_prefix != b.key_prefix and a.check != b.check
    assert a.hex not in repr(a) and a.hex not in str(a) and a.hex not in a.key_prefix + a.check
    assert JobSecret(a.hex).key_prefix == a.key_prefix  # derived, not drawn
    with pytest.raises(SecretError):
        JobSecret("abc")


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=8)), max_size=5), st.data())
def test_a_mac_verifies_its_value_and_nothing_else(value, data):
    secret = JobSecret("0" * 64)
    mac = secret.sign(value)
    assert secret.verify(value, mac)
    assert not JobSecret("1" * 64).verify(value, mac)
    changed = {**value, data.draw(st.text(max_size=8), label="key"): data.draw(st.integers(), label="new")}
    if changed != value:
        assert not secret.verify(changed, mac)


def test_secret_files_are_private_and_checked(tmp_path, monkeypatch):
    secret = JobSecret.generate()
    path = write_secret_file(tmp_path / "secret", secret)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_secret_file(path) == secret == load_secret(str(path), {})
    os.chmod(path, 0o644)
    with pytest.raises(SecretError, match="open to other users"):
        read_secret_file(path)
    assert load_secret(None, {"OOBLAB_SECRET": secret.hex}) == secret
    with pytest.raises(SecretError, match="no job secret"):
        load_secret(None, {})
    with pytest.raises(SecretError, match="does not hold"):
        load_secret(None, {"OOBLAB_SECRET": "not hex"})


# -- registrations ---------------------------------------------------------------------------
def _entry(secret: JobSecret, slot: int, **change) -> bytes:
    body = {"worker_id": slot, "node": "node0", "gpu": 0, "host": "h", "pid": 7, **change}
    return json.dumps({**body, "proof": secret.sign(body)}).encode()


def test_a_registration_parses_only_when_well_formed_and_proven():
    secret = JobSecret.generate()
    assert rv.parse_registration(_entry(secret, 3), 3, secret) == rv.WorkerInfo(3, "node0", 0, "h", 7)
    bad = [
        b"\xff\xfe",
        b"[1, 2]",
        b"{}",
        _entry(secret, 3, gpu="0"),
        _entry(secret, 3, extra=1),
        _entry(secret, 2),  # proven, but not for slot 3
        _entry(JobSecret.generate(), 3),  # someone else's secret
        json.dumps({"worker_id": 3, "node": "node0", "gpu": 0, "host": "h", "pid": 7}).encode(),  # no proof
    ]
    for raw in bad:
        with pytest.raises(rv.RegistrationRefused):
            rv.parse_registration(raw, 3, secret)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_no_bytes_crash_the_registration_parser(raw):
    secret = JobSecret("2" * 64)
    try:
        rv.parse_registration(raw, 0, secret)
    except rv.RegistrationRefused:
        pass


# -- the store: where it listens, who it admits ---------------------------------------------
@pytest.fixture
def hosted():
    secret = JobSecret.generate()
    store = transport.host_store("127.0.0.1", 0, secret, timeout_s=10.0)
    yield store, secret
    store.close()


@pytest.mark.skipif(not LINUX, reason="reads /proc/net/tcp")
def test_the_store_listens_on_the_asked_address_only(hosted):
    store, _ = hosted
    mine = [s for s in listening_sockets(os.getpid()) if s[1] == store.port]
    assert mine == [("127.0.0.1", store.port)]  # not 0.0.0.0, not [::]


def test_a_busy_or_invalid_port_is_a_listen_error(hosted):
    store, _ = hosted
    with pytest.raises(ListenError, match="in use"):
        transport.listen_socket("127.0.0.1", store.port)
    with pytest.raises(ListenError, match="0..65535"):
        transport.listen_socket("127.0.0.1", 99999)
    with pytest.raises(ListenError, match="not an address"):
        transport.listen_socket("no-such-host.invalid", 0)


def test_a_wrong_secret_is_refused_and_an_absent_coordinator_is_bounded(hosted):
    store, secret = hosted
    address = f"127.0.0.1:{store.port}"
    with pytest.raises(SecretError, match="refused this job secret"):
        transport.connect(address, JobSecret.generate(), 5.0)
    free = transport.listen_socket("127.0.0.1", 0)
    port = free.getsockname()[1]
    free.close()
    t0 = time.monotonic()
    with pytest.raises(ConnectError, match="cannot reach"):
        transport.connect(f"127.0.0.1:{port}", secret, 1.0)
    assert time.monotonic() - t0 < 5.0


def test_without_the_secret_nothing_reaches_the_jobs_keys(hosted):
    """A foreign client on the raw store writes the unprefixed names of the job's keys
    (a registration, abort, a fence); the job's view sees none of it, while a client
    with the secret shares the job's keys."""
    store, secret = hosted
    address = f"127.0.0.1:{store.port}"
    foreign = dist.TCPStore(
        "127.0.0.1", store.port, is_master=False, timeout=__import__("datetime").timedelta(seconds=5)
    )
    foreign.add(keys.WORKER_COUNT, 1)
    foreign.set(keys.worker_key(0), _entry(JobSecret.generate(), 0))
    foreign.set(keys.ABORT, "pwned")
    foreign.set(keys.fence_key(0), "pwned")
    assert store.store.add(keys.WORKER_COUNT, 0) == 0
    assert not store.store.check([keys.ABORT]) and not store.store.check([keys.fence_key(0)])
    friend = transport.connect(address, secret, 5.0)
    rv.put_signed(store.store, keys.JOB, {"config": {}}, secret)
    assert rv.get_signed(friend, keys.JOB, secret) == {"config": {}}
    friend.set(keys.JOB, json.dumps({"value": {"config": {"checkpoint_dir": "/etc"}}, "mac": "0" * 64}))
    with pytest.raises(SecretError, match="not signed"):
        rv.get_signed(store.store, keys.JOB, secret)


def test_malformed_and_forged_registrations_are_refused_and_the_rest_admitted(hosted):
    """Entries under the job's prefix (as written by a party that saw it on the wire,
    but lacks the secret) are refused with a reason and fenced; a good one after them
    is admitted; nothing raises."""
    store, secret = hosted
    members = Membership(store.store, 1, 10.0, None, secret)
    job = store.store
    for raw in (b"not json", json.dumps({"worker_id": 1}).encode(), _entry(JobSecret.generate(), 2)):
        slot = job.add(keys.WORKER_COUNT, 1) - 1
        job.set(keys.worker_key(slot), raw)
    info = rv.register(job, "node0", 0, secret)
    became = members.poll_registrations()
    assert became == ["node0"] and list(members.workers) == [info.worker_id] == [3]
    assert len(members.refused) == 3 and all("workers/" in r for r in members.refused)
    assert all(job.check([keys.fence_key(slot)]) for slot in range(3))


def test_the_verdict_wait_ends_at_the_group_timeout(hosted):
    store, _ = hosted
    t0 = time.monotonic()
    with pytest.raises(StepTimeout, match="group timeout"):
        wait_verdict(store.store, 0, 0, 0.5)
    assert time.monotonic() - t0 < 5.0


# -- profile files ---------------------------------------------------------------------------
def test_a_corrupt_model_args_file_is_reported(tmp_path):
    from planner.oobleck_format import write_oobleck_profile
    from real.control.planning import estimate_tiny_gpt

    config = RunConfig()
    directory = write_oobleck_profile(
        estimate_tiny_gpt(config.tiny, config.microbatch_size, config.dtype), tmp_path / "prof"
    )
    resolve_run_profile(config.with_(profile_dir=str(directory)))  # fine as written
    (directory / "model_args.json").write_text('{"hidden": 64')
    with pytest.raises(ProfileError, match="model_args.json: not a readable JSON"):
        check_profile_files(directory)
    (directory / "model_args.json").write_text("[1]")
    with pytest.raises(ProfileError, match="expected an object"):
        resolve_run_profile(config.with_(profile_dir=str(directory)))
    with pytest.raises(ProfileError):
        resolve_run_profile(RunConfig(compute="emulated", model=str(directory)))


# -- the commands: one line and exit 2, or "internal error" and exit 1 ------------------------
def _main(args, capsys) -> tuple[int, str]:
    previous = signal.getsignal(signal.SIGTERM)
    try:
        code = main(args)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return code, capsys.readouterr().err


def test_busy_and_invalid_ports_are_one_line_errors(capsys, tmp_path):
    busy = transport.listen_socket("127.0.0.1", 0)
    try:
        for port, message in ((99999, "--port must be 0..65535"), (busy.getsockname()[1], "is in use")):
            code, err = _main(["coordinator", "--port", str(port), "--out", str(tmp_path / str(port))], capsys)
            assert code == 2 and message in err and err.count("\n") == 1, err
    finally:
        busy.close()


def test_a_corrupt_profile_is_a_one_line_error(capsys, tmp_path):
    profile = tmp_path / "prof"
    profile.mkdir()
    (profile / "model_args.json").write_text("{")
    code, err = _main(["run", "--profile", str(profile), "--out", str(tmp_path / "run")], capsys)
    assert code == 2 and "model_args.json" in err and err.count("\n") == 1, err


def test_an_internal_error_says_so_and_logs_its_traceback(capsys, tmp_path, monkeypatch):
    """A ValueError from inside the backend is a bug, not a bad request."""
    from real.launch import local

    def broken(*args, **kwargs):
        raise ValueError("a layout the planner should never produce")

    monkeypatch.setattr(local, "run_local", broken)
    code, err = _main(["run", "--out", str(tmp_path / "run")], capsys)
    assert code == 1 and "internal error" in err and "ValueError" in err and err.count("\n") == 1, err
    log = (tmp_path / "run" / "error.log").read_text()
    assert "Traceback" in log and "a layout the planner should never produce" in log and "broken" in log


@pytest.mark.timeout(60)
def test_an_unreachable_coordinator_is_one_line_within_the_connect_timeout(tmp_path):
    secret = write_secret_file(tmp_path / "secret", JobSecret.generate())
    t0 = time.monotonic()
    worker = start(
        [
            "worker",
            "--coordinator",
            "127.0.0.1:1",
            "--name",
            "a",
            "--connect-timeout",
            "2",
            "--secret-file",
            str(secret),
        ]
    )
    done = finish(worker, 45)
    elapsed = time.monotonic() - t0
    assert done.returncode == 2 and "cannot reach the coordinator at 127.0.0.1:1 within 2 s" in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert elapsed < 30, elapsed  # import torch (seconds on a loaded machine) + 2 s


# -- whole jobs --------------------------------------------------------------------------------
def _read_until(stream, marker: str, timeout_s: float) -> list[str]:
    deadline, seen = time.time() + timeout_s, []
    while time.time() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if marker in line:
            return seen
    raise AssertionError(f"{marker!r} not seen within {timeout_s} s:\n{''.join(seen[-20:])}")


@pytest.mark.skipif(not LINUX, reason="reads /proc/net/tcp")
@pytest.mark.timeout(240)
def test_a_local_job_listens_on_loopback_only(tmp_path):
    """While `ooblab run --nodes 2` trains, every listening socket of the coordinator and
    of its workers (the store, gloo's pairs) is on loopback."""
    run = start(["run", "--nodes", "2", "--f", "1", "--steps", "400", "--threads", "1", "--out", str(tmp_path / "run")])
    try:
        _read_until(run.stderr, "training_started", 180)
        pids = session_processes(run.pid)
        sockets = {pid: listening_sockets(pid) for pid in pids}
        os.killpg(run.pid, signal.SIGTERM)
        run.communicate(timeout=60)
    finally:
        reap(run)
    coordinator = sockets[run.pid]
    assert len(coordinator) == 1 and _loopback(coordinator[0][0]), sockets
    workers = [s for pid, found in sockets.items() if pid != run.pid for s in found]
    assert workers, f"no worker listens at all (gloo not found?): {sockets}"
    assert all(_loopback(address) for address, _ in workers), sockets


@pytest.mark.timeout(240)
def test_a_multi_machine_job_admits_only_holders_of_its_secret(tmp_path):
    """A coordinator on loopback: a worker with another job's secret exits 2 with one
    line; a foreign client sets abort and fences on the store and forges a registration
    under the job's prefix; the refused registration is logged; two launchers holding
    the secret finish the job."""
    from datetime import timedelta

    address_file, secret_file = tmp_path / "address", tmp_path / "secret"
    coordinator = start([
        "coordinator", "--nodes", "2", "--f", "1", "--steps", "3", "--address-file", str(address_file),
        "--secret-file", str(secret_file), "--threads", "1", "--out", str(tmp_path / "run"), "--json",
    ])  # fmt: skip
    launchers = []
    try:
        deadline = time.time() + 90
        while not address_file.exists() and time.time() < deadline and coordinator.poll() is None:
            time.sleep(0.1)
        address = address_file.read_text().strip()
        assert address.startswith("127.0.0.1:")
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
        secret = read_secret_file(secret_file)
        host, port = transport.parse_address(address)

        other = write_secret_file(tmp_path / "other", JobSecret.generate())
        refused = finish(
            start(
                [
                    "worker",
                    "--coordinator",
                    address,
                    "--name",
                    "x",
                    "--secret-file",
                    str(other),
                    "--connect-timeout",
                    "20",
                ]
            ),
            60,
        )
        assert (
            refused.returncode == 2 and "refused this job secret" in refused.stderr and refused.stderr.count("\n") == 1
        ), refused.stderr

        foreign = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=20))
        foreign.set(keys.ABORT, "pwned")
        foreign.set(keys.fence_key(0), "pwned")
        sniffer = dist.PrefixStore(secret.key_prefix, foreign)  # saw the prefix on the wire, not the secret
        slot = sniffer.add(keys.WORKER_COUNT, 1) - 1
        sniffer.set(keys.worker_key(slot), _entry(JobSecret.generate(), slot))

        for name in ("hostA", "hostB"):
            launchers.append(
                start(
                    [
                        "node",
                        "--coordinator",
                        address,
                        "--name",
                        name,
                        "--threads",
                        "1",
                        "--secret-file",
                        str(secret_file),
                    ]
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
    assert "listening on 127.0.0.1 only" in result.stderr and "--host" in result.stderr
    assert secret.hex not in result.stderr + result.stdout
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    refusals = [e for e in events if e["kind"] == "registration_refused"]
    assert len(refusals) == 1 and "proof" in refusals[0]["reason"], refusals
    assert secret.hex not in (tmp_path / "run" / "events.jsonl").read_text()


@pytest.mark.skipif(not LINUX, reason="Linux interface names")
def test_collectives_are_pinned_to_the_interface_facing_the_coordinator(monkeypatch):
    """A local job's gloo (and NCCL's bootstrap) listen on loopback, not wherever the
    host name resolves; an operator's own choice is kept."""
    from real.worker.main import IFNAME_VARIABLES, pin_collectives

    for variable in IFNAME_VARIABLES:  # recorded as absent, so what pin_collectives sets is undone
        monkeypatch.setenv(variable, "")
        monkeypatch.delenv(variable)
    name = pin_collectives("127.0.0.1:29500")
    assert name is not None and transport.interface_of("127.0.0.1") == name
    assert all(os.environ[v] == name for v in IFNAME_VARIABLES)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    pin_collectives("127.0.0.1:29500")
    assert os.environ["GLOO_SOCKET_IFNAME"] == "eth7"


class _Beats:
    """A store that answers heartbeat counters only, as a test sets them."""

    def __init__(self):
        self.count: dict[str, int] = {}

    def add(self, key: str, amount: int) -> int:
        self.count[key] = self.count.get(key, 0) + amount
        return self.count[key]


def _members(n: int, patience_s: float) -> tuple[Membership, _Beats]:
    store = _Beats()
    members = Membership(store, 1, 3.0, None, JobSecret.generate(), all_silent_patience_s=patience_s)  # type: ignore[arg-type]
    for wid in range(n):
        members.workers[wid] = WorkerRecord(rv.WorkerInfo(wid, f"node{wid}", 0, "h", 100 + wid), seen_s=0.0)
    return members, store


def _beat(store: _Beats, *wids: int) -> None:
    for wid in wids:
        store.add(keys.heartbeat_key(wid), 1)


def test_one_silent_worker_is_lost_at_the_timeout_but_all_silent_together_are_waited_out():
    """One worker quiet for the timeout while the others beat is lost at once; every worker
    quiet together (the coordinator's own link cut) is waited out for the patience, and
    lost only past it, each reason saying so."""
    members, store = _members(3, patience_s=10.0)
    t = 0.0
    for _ in range(8):  # 0.5 s polls; node2 stops beating after t = 0
        t += 0.5
        _beat(store, 0, 1)
        lost = members.poll_heartbeats(t)
    assert list(lost) == [2] and "missed heartbeats" in lost[2]

    members, store = _members(3, patience_s=10.0)
    members.poll_heartbeats(0.25)
    t, lost = 0.25, {}
    while not lost and t < 30:
        t += 0.5
        lost = members.poll_heartbeats(t)
        if t < 13.0:
            assert lost == {} and (t <= 3.5 or members.all_silent_since_s is not None)
    assert sorted(lost) == [0, 1, 2] and 13.0 <= t <= 14.0
    assert all("every worker silent at once" in reason for reason in lost.values())

    members, store = _members(2, patience_s=10.0)  # beats resume inside the patience: nobody lost
    t = 0.0
    for step in range(40):
        t += 0.5
        if step > 20:
            _beat(store, 0, 1)
        assert members.poll_heartbeats(t) == {}
    assert members.all_silent_since_s is None


def test_after_an_all_silent_gap_one_early_beat_does_not_doom_the_others():
    """Every worker quiet for half the timeout at once (the coordinator's link cut for
    1.9 s): one worker's connection resumes first and beats, the others' only after the
    timeout (their TCP backoff). The episode began with the gap, so they are excused: a
    run under load lost 4 of 5 workers this way before."""
    members, store = _members(5, patience_s=10.0)
    members.poll_heartbeats(0.0)
    t = 0.0
    while t < 12.0:
        t += 0.25
        if t >= 2.0:
            _beat(store, 1)
        if t >= 4.5:
            _beat(store, 0, 2, 3, 4)
        assert members.poll_heartbeats(t) == {}, t
    assert members.all_silent_since_s is None


def test_a_worker_whose_beats_return_late_after_an_all_silent_episode_is_still_excused():
    """After every worker fell silent together, the episode lasts while any of them is
    still quiet: one whose beats come back seconds after the others' (its TCP backoff)
    is not lost, one that never comes back is lost only past the patience, and a worker
    that falls silent after the episode ended is judged by the plain timeout again."""
    for late_s, expect_lost in ((9.0, False), (None, True)):
        members, store = _members(3, patience_s=10.0)
        members.poll_heartbeats(0.0)
        t, lost = 0.0, {}
        while t < 20.0 and not lost:
            t += 0.5
            if t >= 6.0:
                _beat(store, 0, 1)  # the link is back: two beat again at once
            if late_s is not None and t >= late_s:
                _beat(store, 2)
            lost = members.poll_heartbeats(t)
            if t <= 13.0:
                assert lost == {}, (t, lost)
        if expect_lost:
            assert list(lost) == [2] and "every worker silent at once" in lost[2] and t <= 14.0
        else:
            assert lost == {} and members.all_silent_since_s is None
            for _ in range(8):  # the episode is over: node2 quiet alone is lost at the timeout
                t += 0.5
                _beat(store, 0, 1)
                lost = members.poll_heartbeats(t)
            assert list(lost) == [2] and "every worker silent" not in lost[2]


def test_orders_and_directives_are_signed_and_bound_to_their_key(hosted):
    """A worker acts on an order or a directive only if the job's secret signed it under
    that very key: a forged one, or a genuine one copied to another number or generation
    (a replay), is refused by name."""
    store, secret = hosted
    job = store.store
    n = rv.publish_order(job, {"kind": "generation", "generation": 1}, secret)
    assert rv.read_order(job.get(keys.order_key(n)), n, secret) == {"kind": "generation", "generation": 1}
    job.set(keys.order_key(n + 1), job.get(keys.order_key(n)))  # replayed under the next number
    with pytest.raises(SecretError, match="orders/1.*not signed"):
        rv.read_order(job.get(keys.order_key(n + 1)), n + 1, secret)
    forged = {
        "value": {"kind": "end"},
        "mac": JobSecret.generate().sign({"key": keys.order_key(2), "value": {"kind": "end"}}),
    }
    job.set(keys.order_key(2), json.dumps(forged))
    with pytest.raises(SecretError, match="not signed"):
        rv.read_order(job.get(keys.order_key(2)), 2, secret)
    with pytest.raises(SecretError, match="not JSON"):
        rv.read_order(b"\xff", 3, secret)
    rv.put_signed(job, keys.directive_key(1), {"generation": 1}, secret)
    job.set(keys.directive_key(2), job.get(keys.directive_key(1)))
    assert rv.get_signed(job, keys.directive_key(1), secret) == {"generation": 1}
    with pytest.raises(SecretError, match="gen2/directive"):
        rv.get_signed(job, keys.directive_key(2), secret)
