"""The command line under drawn values: every flag and spec key of the quick subcommands
(`plan`, `simulate`, `traces info`, `costs`) gets numbers out of range, huge, negative, NaN,
strings, unicode and empty text. Whatever the value, the command exits 0 or 2, prints no
traceback, says an exit 2 in one line, and leaves nothing behind. `OOBLAB_FUZZ_EXAMPLES`
sets the examples per test (default 40, drawn the same way every run: about 10 s here);
`benchmarks/fuzz_cli.py` runs the longer search on fresh draws."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ooblab.cli import main

EXAMPLES = int(os.environ.get("OOBLAB_FUZZ_EXAMPLES", "40"))
# CI draws the same examples every run (a suite that passes stays passing); the longer
# search (`benchmarks/fuzz_cli.py`) draws new ones each time
RANDOM = os.environ.get("OOBLAB_FUZZ_RANDOM") == "1"

WORDS = [
    "", " ", "nan", "NaN", "inf", "-inf", "1e309", "-1e309", "1e-320", "-0", "0", "0.5", "-1", "1e9", "1e20",
    "0x10", "1_000", "٣", "∞", "true", "None", "[]", "{}", "a,b", "=", "..", "/", "x" * 300, "3s", "1h", "-5m",
]  # fmt: skip
VALUES = st.one_of(
    st.sampled_from(WORDS),
    st.integers(-(10**30), 10**30).map(str),
    st.integers(-3, 5000).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=12).filter(lambda t: "\x00" not in t),
)

PLAN_FLAGS = ["--nodes", "--gpus-per-node", "--f", "--global-batch", "--microbatch", "--inter-node-gbps"]
SIM_FLAGS = [
    "--seed", "--global-batch", "--microbatch-size", "--fault-tolerance", "--duration-s", "--inter-node-gbps",
    "--checkpoint-every-iterations", "--checkpoint-every-s", "--gpus-per-node",
]  # fmt: skip
SIM_SET = [
    "detect_s", "restart_fixed_s", "price_per_node_hour", "reconfigure_overhead_s", "node_startup_s",
    "checkpoint_fixed_s", "storage_gb_per_s", "restart_cost_factor", "design.fault_tolerance",
    "design.join_horizon_s", "seed", "duration_s",
]  # fmt: skip
SPEC_KEYS = {
    "spot": ["nodes", "hours", "seed", "profile"],
    "fixed": ["interval", "nodes", "removals", "start", "hour_decimals"],
    "datacenter": ["gpus", "days", "spares", "rate", "gpu_mtbf", "host_repair", "repair_sigma", "gpus_per_host"],
}
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not RANDOM,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.fixture(autouse=True)
def quick_limits(monkeypatch):
    """The planner's search stops at its limit; lowered so that a drawn size that asks for
    minutes of search is refused in seconds (the refusal is what is checked)."""
    import planner.mix

    monkeypatch.setattr(planner.mix, "SEARCH_LIMIT_S", 2.0)


def check(argv: list[str], tmp_path: Path, capsys) -> None:
    before = sorted(tmp_path.rglob("*"))
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own exit
        code = int(exc.code or 0) if not isinstance(exc.code, str) else 2
    out = capsys.readouterr()
    assert code in (0, 2), (argv, code, out.err[-2000:])
    assert "Traceback" not in out.err and "internal error" not in out.err, (argv, out.err[-2000:])
    if code == 2:
        lines = [line for line in out.err.splitlines() if line.strip()]
        assert len(lines) == 1, (argv, out.err[-2000:])
    assert sorted(tmp_path.rglob("*")) == before, argv


@pytest.mark.timeout(300)
@FUZZ
@given(flag=st.sampled_from(PLAN_FLAGS), value=VALUES)
def test_plan_takes_any_value_as_a_plan_or_one_line(flag, value, tmp_path, capsys):
    check(["plan", "--model", "gpt3-350m", flag, value], tmp_path, capsys)


@pytest.mark.timeout(300)
@FUZZ
@given(flag=st.sampled_from(SIM_FLAGS), value=VALUES)
def test_simulate_takes_any_flag_value_as_a_run_or_one_line(flag, value, tmp_path, capsys):
    check(["simulate", "--no-write", "--calibration", "planner", "--trace", "fixed:interval=1h,nodes=8,removals=3",
           flag, value], tmp_path, capsys)  # fmt: skip


@pytest.mark.timeout(300)
@FUZZ
@given(key=st.sampled_from(SIM_SET), value=VALUES)
def test_simulate_takes_any_set_value_as_a_run_or_one_line(key, value, tmp_path, capsys):
    check(["simulate", "--no-write", "--calibration", "planner", "--trace", "fixed:interval=1h,nodes=8,removals=3",
           "--set", f"{key}={value}"], tmp_path, capsys)  # fmt: skip


@pytest.mark.timeout(300)
@FUZZ
@given(data=st.data())
def test_a_trace_spec_takes_any_key_value_as_a_trace_or_one_line(data, tmp_path, capsys):
    name = data.draw(st.sampled_from(sorted(SPEC_KEYS)))
    keys = data.draw(st.lists(st.sampled_from(SPEC_KEYS[name]), min_size=1, max_size=3, unique=True))
    values = [data.draw(VALUES).replace(",", ";").replace(":", ";") for _ in keys]
    base = "interval=1h," if name == "fixed" and "interval" not in keys else ""
    spec = f"{name}:{base}" + ",".join(f"{k}={v}" for k, v in zip(keys, values))
    check(["traces", "info", spec], tmp_path, capsys)
