"""The datacenter failure generator against the published Llama 3 interruption statistics.

The published figures (Dubey et al. 2024, Table 5): 419 unexpected interruptions on 16,384
GPUs in 54 days, split by root cause. Generated: 8 seeds at that size and length.
Tolerances (n = interruptions pooled over the seeds, p = a published share):

* interruptions per day: pooled mean within 5 % of 419 / 54 (a Poisson count of 419 has a
  4.9 % standard deviation per seed, 1.7 % pooled over 8), every seed within 4 standard
  deviations;
* share of each component: within 4 sqrt(p (1 - p) / n) + 0.005 of the table's share;
* bursts: never more hosts than a rack holds; share of rack bursts within the same bound of
  the ToR switch share (half the network row: 17.5 / 419).

The figures are computed here from plain (time, kind, node) tuples, not with traces.stats.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces import DATACENTER_PROFILES, TraceError, datacenter_failures, from_spec
from traces.cli import register
from traces.datacenter import expected_interruptions_per_day
from traces.datacenter_profiles import (
    LLAMA3_DAYS,
    LLAMA3_GPUS,
    LLAMA3_TABLE,
    LLAMA3_UNEXPECTED,
    Component,
    DatacenterProfile,
    calibrate,
)
from traces.spec import parse_spec

SEEDS = range(8)
PUBLISHED_PER_DAY = LLAMA3_UNEXPECTED / LLAMA3_DAYS
# Table 5 counts per component of ours, worked out by hand from the rows (network halved).
TABLE_COUNTS = {
    "gpu": 148 + 72 + 19 + 17 + 6 + 6,
    "host": 32 + 7 + 3 + 3 + 2 + 2 + 2 + 2,
    "cable": 17.5,
    "switch": 17.5,
    "software": 54 + 7 + 2,
}


def tuples(trace):
    return [(e.time_s, e.kind, e.node) for e in trace.events]


def burst_table(events):
    """{time: [removed nodes]} from plain event tuples."""
    out: dict[float, list[str]] = {}
    for t, kind, node in events:
        if kind == "remove":
            out.setdefault(t, []).append(node)
    return out


@pytest.fixture(scope="module")
def llama_runs():
    return [datacenter_failures(LLAMA3_GPUS, LLAMA3_DAYS, rng=np.random.default_rng(s)) for s in SEEDS]


# -- the published table and the calibration ---------------------------------------------------


def test_the_table_arithmetic():
    counts = [row.count for row in LLAMA3_TABLE]
    assert len(LLAMA3_TABLE) == 18 and sum(counts) == LLAMA3_UNEXPECTED
    off = [
        row.category for row in LLAMA3_TABLE if abs(100 * row.count / LLAMA3_UNEXPECTED - row.printed_percent) > 0.05
    ]
    assert off == ["Faulty GPU"]  # printed 30.1 %, but 148 / 419 = 35.3 %
    assert round(100 * 148 / 419, 1) == 35.3
    assert sum(row.printed_percent for row in LLAMA3_TABLE) == pytest.approx(94.9)
    gpu_rows = [r for r in LLAMA3_TABLE if r.component == "gpu"]
    assert sum(r.count for r in gpu_rows) == 268
    assert sum(r.printed_percent for r in gpu_rows) == pytest.approx(58.7)  # the paper's "58.7 %"
    assert sum(r.count for r in LLAMA3_TABLE if r.component != "software") == 356


def test_calibration_gives_the_table_back():
    prof = DATACENTER_PROFILES["llama3"]
    hosts, racks = LLAMA3_GPUS // 8, LLAMA3_GPUS // 16
    units = {"gpu": LLAMA3_GPUS, "host": hosts, "cable": hosts, "switch": racks, "software": hosts}
    for comp in prof.components:
        assert units[comp.name] * LLAMA3_DAYS / comp.mtbf_d == pytest.approx(TABLE_COUNTS[comp.name])
    assert prof.component("gpu").mtbf_d == pytest.approx(16384 * 54 / 268)  # 3,301 days per GPU
    assert expected_interruptions_per_day(LLAMA3_GPUS) == pytest.approx(PUBLISHED_PER_DAY)
    assert expected_interruptions_per_day(LLAMA3_GPUS, "llama3-hardware") == pytest.approx(356 / 54)
    # per-unit rates: the expected rate grows with the cluster (racks round up)
    assert expected_interruptions_per_day(100_000) == pytest.approx(PUBLISHED_PER_DAY * 100_000 / 16_384, rel=1e-3)
    assert calibrate() == prof


# -- generated traces against the published statistics -----------------------------------------


def test_interruptions_per_day_match_the_published_rate(llama_runs):
    per_seed = [len(burst_table(tuples(r.trace))) for r in llama_runs]
    pooled = sum(per_seed) / len(per_seed) / LLAMA3_DAYS
    assert pooled == pytest.approx(PUBLISHED_PER_DAY, rel=0.05)
    sd = math.sqrt(LLAMA3_UNEXPECTED)
    assert all(abs(n - LLAMA3_UNEXPECTED) <= 4 * sd for n in per_seed), per_seed
    # one interruption = one burst at its own timestamp
    for run in llama_runs:
        bursts = burst_table(tuples(run.trace))
        assert sorted(bursts) == run.interruption_time_s.tolist()
        assert [len(bursts[t]) for t in sorted(bursts)] == run.interruption_size.tolist()


def test_the_rate_check_has_teeth():
    """Twice the GPU failure rate fails the same 5 % check."""
    prof = DATACENTER_PROFILES["llama3"]
    gpu = prof.component("gpu")
    doubled = replace(
        prof, components=tuple(replace(c, mtbf_d=c.mtbf_d / 2) if c is gpu else c for c in prof.components)
    )
    runs = [datacenter_failures(LLAMA3_GPUS, LLAMA3_DAYS, rng=np.random.default_rng(s), profile=doubled) for s in SEEDS]
    pooled = np.mean([len(burst_table(tuples(r.trace))) for r in runs]) / LLAMA3_DAYS
    assert pooled != pytest.approx(PUBLISHED_PER_DAY, rel=0.05)
    assert pooled == pytest.approx((419 + 268) / 54, rel=0.05)


def test_share_by_component_matches_the_table(llama_runs):
    names = llama_runs[0].components
    causes = np.concatenate([r.interruption_component for r in llama_runs])
    n = len(causes)
    for index, name in enumerate(names):
        p = TABLE_COUNTS[name] / LLAMA3_UNEXPECTED
        share = float(np.mean(causes == index))
        assert abs(share - p) <= 4 * math.sqrt(p * (1 - p) / n) + 0.005, (name, share, p)


def test_burst_sizes(llama_runs):
    sizes = np.concatenate([[len(v) for v in burst_table(tuples(r.trace)).values()] for r in llama_runs])
    assert set(sizes.tolist()) <= {1, 2}
    p = TABLE_COUNTS["switch"] / LLAMA3_UNEXPECTED
    assert abs(np.mean(sizes == 2) - p) <= 4 * math.sqrt(p * (1 - p) / len(sizes)) + 0.005
    # every 2-host burst is one rack (hosts 2k+1 and 2k+2, 1-based names)
    for run in llama_runs:
        for nodes in burst_table(tuples(run.trace)).values():
            racks = {(int(node[4:]) - 1) // 2 for node in nodes}
            assert len(racks) == 1


def test_bigger_racks_give_bigger_bursts():
    run = datacenter_failures(
        16_384, 54, rng=np.random.default_rng(3), profile=replace(DATACENTER_PROFILES["llama3"], hosts_per_rack=8)
    )
    names = run.components
    switch = run.interruption_size[run.interruption_component == names.index("switch")]
    others = run.interruption_size[run.interruption_component != names.index("switch")]
    assert len(switch) > 5 and np.all(others == 1)
    assert switch.max() == 8 and switch.mean() > 7.5  # a rack rarely has a host already down


def test_hardware_profile_rate():
    runs = [
        datacenter_failures(LLAMA3_GPUS, LLAMA3_DAYS, rng=np.random.default_rng(s), profile="llama3-hardware")
        for s in SEEDS
    ]
    pooled = np.mean([len(burst_table(tuples(r.trace))) for r in runs]) / LLAMA3_DAYS
    assert pooled == pytest.approx(356 / 54, rel=0.05)
    assert "software" not in runs[0].components


# -- repairs and spares ---------------------------------------------------------------------


def test_repaired_hosts_return_as_themselves_after_the_repair_time():
    prof = DATACENTER_PROFILES["llama3"]
    delays: dict[str, list[float]] = {c.name: [] for c in prof.components}
    for seed in range(3):
        run = datacenter_failures(100_000, 30, rng=np.random.default_rng(seed))
        events = tuples(run.trace)
        assert {n for t, k, n in events if t == 0.0} == {f"node{i}" for i in range(1, 12_501)}
        removed_at: dict[str, float] = {}
        cause = dict(zip(run.interruption_time_s.tolist(), run.interruption_component.tolist()))
        cause_of: dict[str, int] = {}
        for t, kind, node in events:
            if kind == "remove":
                removed_at[node], cause_of[node] = t, cause[t]
            elif t > 0:
                start = removed_at.pop(node)  # KeyError: a node joined that had not failed
                if start < 15 * 86400:  # repairs this short are rarely cut off by the end
                    delays[run.components[cause_of[node]]].append(t - start)
    for comp in prof.components:
        got = np.median(delays[comp.name]) / 3600
        assert got == pytest.approx(comp.repair_median_h, rel=0.25), comp.name


def test_spares_join_after_the_spare_delay():
    run = datacenter_failures(16_384, 54, rng=np.random.default_rng(4), spares=200, spare_delay_s=600)
    events = tuples(run.trace)
    hosts = run.hosts
    live, max_live = set(), 0
    joins = [(t, n) for t, k, n in events if k == "add" and t > 0]
    removals = [t for t, k, _ in events if k == "remove"]
    first_spares = [n for _, n in joins[:5]]
    assert first_spares == [f"node{hosts + i}" for i in range(1, 6)]  # idle spares, in order
    assert sorted(t for t, _ in joins) == sorted(t + 600 for t in removals if t + 600 <= 54 * 86400)
    for _, kind, node in events:
        (live.add if kind == "add" else live.remove)(node)
        max_live = max(max_live, len(live))
    assert max_live == hosts
    # with 200 spares the job never runs short for longer than the spare delay
    assert len(live) == hosts or events[-1][0] > 54 * 86400 - 600


def test_without_enough_spares_the_job_waits_for_repairs():
    run = datacenter_failures(
        8 * 64,
        20,
        rng=np.random.default_rng(0),
        spares=1,
        spare_delay_s=60,
        profile=_fast_profile(mtbf_d=5.0, repair_h=48.0),
    )
    events = tuples(run.trace)
    live: set[str] = set()
    short = 0
    for _, kind, node in events:
        (live.add if kind == "add" else live.remove)(node)
        assert len(live) <= run.hosts
        short = max(short, run.hosts - len(live))
    assert short > 2  # one spare cannot cover failures every few hours with 2-day repairs
    assert len({n for _, _, n in events}) == run.hosts + 1


def _fast_profile(mtbf_d: float, repair_h: float, hosts_per_rack: int = 2) -> DatacenterProfile:
    return DatacenterProfile(
        name="fast",
        source="test",
        components=(Component("host", "host", mtbf_d, repair_h), Component("switch", "rack", 4 * mtbf_d, repair_h)),
        hosts_per_rack=hosts_per_rack,
    )


@settings(max_examples=40, deadline=None)
@given(
    hosts=st.integers(1, 40),
    hpr=st.integers(1, 4),
    spares=st.integers(0, 4),
    mtbf_d=st.floats(0.5, 50),
    repair_h=st.floats(0.1, 200),
    days=st.floats(0.5, 20),
    delay_s=st.sampled_from([0.0, 60.0, 3600.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_invariants(hosts, hpr, spares, mtbf_d, repair_h, days, delay_s, seed):
    prof = _fast_profile(mtbf_d, repair_h, hpr)
    run = datacenter_failures(
        hosts * 8, days, rng=np.random.default_rng(seed), profile=prof, spares=spares, spare_delay_s=delay_s
    )
    events = tuples(run.trace)
    allowed = {f"node{i}" for i in range(1, hosts + spares + 1)}
    assert {n for _, _, n in events} <= allowed
    assert [n for _, _, n in events[:hosts]] == [f"node{i}" for i in range(1, hosts + 1)]
    live: set[str] = set()
    for t, kind, node in events:
        assert t <= days * 86400 and t == int(t)
        (live.add if kind == "add" else live.remove)(node)
        assert len(live) <= hosts
    bursts = burst_table(events)
    assert sorted(bursts) == run.interruption_time_s.tolist()
    for nodes in bursts.values():
        assert len({(int(n[4:]) - 1) // hpr for n in nodes}) == 1 and len(nodes) <= hpr
    if spares == 0:  # every host that joins later is one that failed earlier
        gone: set[str] = set()
        for _, kind, node in events[hosts:]:
            if kind == "remove":
                gone.add(node)
            else:
                gone.remove(node)
        assert len(live) + len(gone) == hosts


# -- determinism, specs, errors, the CLI --------------------------------------------------------


def test_determinism_by_seed():
    a = from_spec("datacenter:gpus=16384,days=54,seed=7")
    b = from_spec("datacenter:gpus=16384,days=54,seed=7")
    c = from_spec("datacenter:gpus=16384,days=54,seed=8")
    assert a == b and tuples(a) != tuples(c)
    # seed= in the spec wins over the rng argument; without it the rng drives the trace
    assert from_spec("datacenter:days=5,seed=7", rng=np.random.default_rng(1)) == from_spec("datacenter:days=5,seed=7")
    assert tuples(from_spec("datacenter:days=5", rng=np.random.default_rng(1))) == tuples(
        datacenter_failures(16384, 5, rng=np.random.default_rng(1)).trace
    )


def test_spec_keys_reach_the_generator():
    assert parse_spec("datacenter:gpus=64,days=2,seed=1") == ("datacenter", {"gpus": "64", "days": "2", "seed": "1"})
    trace = from_spec(
        "datacenter:gpus=256,days=10,seed=2,gpu_mtbf=2d,gpu_repair=1h,repair_sigma=0,"
        "host_mtbf=off,cable_mtbf=off,switch_mtbf=off,software_mtbf=off"
    )
    events = tuples(trace)
    removed: dict[str, float] = {}
    delays = []
    for t, kind, node in events:
        if kind == "remove":
            removed[node] = t
        elif t > 0:
            delays.append(t - removed.pop(node))
    # 256 GPUs failing every 2 days each: 4 failures a day per host, each down 1 h, so a host
    # is up 24 / (24 + 4) of the time and failures of hosts already down are thinned out
    assert len(burst_table(events)) / 10 == pytest.approx(128 * 24 / 28, rel=0.05)
    assert set(delays) == {3600.0}
    spared = tuples(from_spec("datacenter:gpus=256,days=10,seed=2,gpu_mtbf=2d,spares=3,spare_delay=5m"))
    assert len({n for _, _, n in spared}) == 32 + 3
    racks = from_spec("datacenter:gpus=1024,days=54,seed=2,hosts_per_rack=4,switch_mtbf=20d")
    assert max(len(v) for v in burst_table(tuples(racks)).values()) == 4
    assert from_spec("datacenter:gpus=64,gpus_per_host=4,days=1").initial_nodes[-1] == "node16"
    quiet = from_spec(
        "datacenter:gpus=64,days=9,seed=1,"
        + ",".join(f"{c}_mtbf=off" for c in ("gpu", "host", "cable", "switch", "software"))
    )
    assert [(t, k) for t, k, _ in tuples(quiet)] == [(0.0, "add")] * 8


@pytest.mark.parametrize(
    "spec, message",
    [
        ("datacenter:gpus=16384,color=red", "unknown key 'color' for the datacenter generator"),
        ("datacenter:gpus=100", "gpus=100 is not a multiple of gpus_per_host=8"),
        ("datacenter:gpus=0", "gpus must be a whole number >= 1"),
        ("datacenter:gpus=1.5", "gpus='1.5' is not a whole number"),
        ("datacenter:days=0", "days must be > 0"),
        ("datacenter:days=inf", "days='inf' must be finite"),
        ("datacenter:spares=-1", "spares must be a whole number >= 0"),
        ("datacenter:gpu_mtbf=3301", "duration '3301' must be a number and a unit"),
        ("datacenter:gpu_repair=0h", "gpu_repair must be > 0"),
        ("datacenter:profile=llama2", "unknown datacenter profile 'llama2'"),
        ("datacenter:profile=llama3-hardware,software_repair=1h", "profile llama3-hardware has no software component"),
        ("datacenter:hosts_per_rack=0", "hosts_per_rack='0' must be a whole number >= 1"),
        ("datacenter:repair_sigma=-1", "repair_sigma must be >= 0"),
        ("datacenter:spare_delay=soon", "duration 'soon' must be a number and a unit"),
        ("datacenter:gpu_mtbf=0d", "gpu_mtbf must be > 0"),
        ("datacenter:rate=0", "rate must be > 0 interruptions per day"),
        ("datacenter:rate=fast", "rate='fast' is not a number"),
        ("datacenter:rate=nan", "rate='nan' must be finite"),
        (
            "datacenter:rate=5," + ",".join(f"{c}_mtbf=off" for c in ("gpu", "host", "cable", "switch", "software")),
            "rate: every component is off",
        ),
    ],
)
def test_spec_errors(spec, message):
    with pytest.raises(TraceError, match=message) as caught:
        from_spec(spec)
    assert str(caught.value).startswith(spec + ": ") and "\n" not in str(caught.value)


def run_cli(argv):
    parser = argparse.ArgumentParser(prog="ooblab")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["traces", *argv])
    return args.handler(args)


def test_cli_info_reports_interruptions_per_day(capsys):
    assert run_cli(["info", "datacenter:gpus=16384,days=54,seed=1"]) == 0
    text = capsys.readouterr().out
    assert "expected/day  7.76 interruptions per day" in text
    assert "published/day 7.76 (Llama 3: 419 unexpected interruptions" in text
    shown = float(text.split("bursts/day", 1)[1].split()[0])
    assert shown == pytest.approx(PUBLISHED_PER_DAY, rel=4 / math.sqrt(419))
    assert run_cli(["info", "datacenter:gpus=16384,days=54,seed=1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    events = tuples(from_spec("datacenter:gpus=16384,days=54,seed=1"))
    # over the 54 days asked for, not up to the last interruption
    assert out["duration_s"] == 54 * 86400
    assert out["bursts_per_day"] == pytest.approx(len(burst_table(events)) / 54)
    assert out["expected_per_day"] == pytest.approx(PUBLISHED_PER_DAY)
    assert out["max_nodes"] == 2048 and out["largest_burst"] <= 2


def test_cli_bad_spec_exits_2(capsys):
    assert run_cli(["info", "datacenter:gpus=16384,days=54,seed=1,colour=red"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ooblab traces info: error: datacenter:") and "unknown key 'colour'" in err
    assert err.count("\n") == 1


def test_generated_trace_round_trips_through_the_events_csv(tmp_path, capsys):
    spec = "datacenter:gpus=2048,days=30,seed=5,spares=4"
    out = tmp_path / "dc.csv"
    assert run_cli(["generate", spec, "-o", str(out)]) == 0
    capsys.readouterr()
    from traces import load

    assert tuples(load(out)) == tuples(from_spec(spec))
    assert load(out).duration_s == from_spec(spec).duration_s == 30 * 86400


def test_removals_carry_their_cause_through_the_events_csv(tmp_path):
    """Each removal names the component that failed; the canonical CSV keeps it as a fourth
    field, which the loader reads back (and refuses on an add, or empty)."""
    from traces import load, save_events_csv

    trace = from_spec("datacenter:gpus=2048,days=30,seed=5")
    causes = {e.cause for e in trace.events if e.kind == "remove"}
    assert causes <= {"gpu", "host", "cable", "switch", "software"} and len(causes) >= 3
    assert all(e.cause is None for e in trace.events if e.kind == "add")
    path = tmp_path / "dc.csv"
    save_events_csv(trace, path)
    assert load(path).events == trace.events
    for bad, words in [("0,add,a,gpu\n", "only removals have one"), ("0,add,a\n5,remove,a,\n", "an empty cause")]:
        path.write_text(bad)
        with pytest.raises(TraceError, match=words):
            load(path)


def test_a_rate_scales_every_component_and_keeps_the_mix():
    """`rate=` is the expected interruptions a day at the trace's size: FT-HSDP's failure
    every 18 minutes at 98,304 GPUs is 80 a day; each cause keeps its share."""
    from traces.datacenter_spec import profile_from_keys

    keys = {"gpus": "98304", "rate": "80"}
    scaled = profile_from_keys(keys)
    plain = profile_from_keys({"gpus": "98304"})
    assert expected_interruptions_per_day(98304, scaled) == pytest.approx(80.0)
    assert expected_interruptions_per_day(98304, plain) == pytest.approx(PUBLISHED_PER_DAY * 6, rel=0.01)
    ratios = {c.name: c.mtbf_d / p.mtbf_d for c, p in zip(scaled.components, plain.components)}
    assert len(set(round(r, 12) for r in ratios.values())) == 1  # one factor: the mix of causes kept
    overridden = profile_from_keys({"gpus": "1024", "gpu_mtbf": "100d", "rate": "3"})
    assert expected_interruptions_per_day(1024, overridden) == pytest.approx(3.0)


def test_a_rate_is_what_the_generated_trace_shows():
    counts = [
        len(burst_table(tuples(from_spec(f"datacenter:gpus=98304,days=2,rate=80,seed={seed}")))) / 2
        for seed in range(3)
    ]
    pooled = sum(counts) / len(counts)
    # hosts already down thin the failures a little; 480 pooled interruptions: sd 4.6 %
    assert pooled == pytest.approx(80.0, rel=4 / math.sqrt(480))


def test_cli_info_says_the_rate_it_was_scaled_to(capsys):
    assert run_cli(["info", "datacenter:gpus=98304,days=1,rate=80,seed=1"]) == 0
    text = capsys.readouterr().out
    assert "rate          80.00 per day as asked (one failure every 18.0 min)" in text
    assert "expected/day  80.00 interruptions per day" in text
