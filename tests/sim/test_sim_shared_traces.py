"""Every trace of the Oobleck artifact (../shared/traces/oobleck-artifact/) through the three
policies in both calibrations; and the frequency traces regenerated exactly from specs.

Models: BERT-large in the artifact calibration (the one model all three systems run there),
GPT-3-2_7b in the planner calibration (all three fit on V100s; n0 = 4 keeps planning fast).
"""

from __future__ import annotations

import pytest

import traces
from sim.config import SimConfig
from sim.run import simulate

FREQUENCIES = {"6h": "6h", "3h": "3h", "1h": "1h", "30m": "30m", "10m": "10m", "5m": "5m"}


def artifact_traces(shared_dir):
    folder = shared_dir / "traces" / "oobleck-artifact"
    return sorted(folder.glob("*.csv")) + sorted((folder / "scaled").glob("*.csv"))


@pytest.mark.parametrize("calibration,model", [("artifact", "BERT-large"), ("planner", "GPT-3-2_7b")])
def test_every_artifact_trace_runs_in_both_calibrations(shared_dir, calibration, model):
    paths = artifact_traces(shared_dir)
    assert len(paths) == 10
    for path in paths:
        trace = traces.load(path)
        for policy in ("oobleck", "bamboo", "varuna"):
            result = simulate(
                SimConfig.of(policy=policy, model=model, trace=str(path), calibration=calibration), trace=trace
            )
            s = result.summary
            assert s.extra["outcome"] == "ok", (path.name, policy)
            assert s.breakdown.total_s() == pytest.approx(trace.duration_s, rel=1e-9)
            # Varuna can make no progress at all (GPT-3-2_7b on 5m: each removal costs a
            # ~330 s checkpoint and restart, removals come every 299 s); Oobleck always does
            if policy == "oobleck":
                assert s.committed_samples > 0 and s.avg_samples_per_s > 0, path.name


def test_the_frequency_traces_are_reproduced_by_the_fixed_generator(shared_dir):
    folder = shared_dir / "traces" / "oobleck-artifact"
    for name in FREQUENCIES:
        real = traces.load(folder / f"{name}.csv")
        generated = traces.from_spec(f"fixed:interval={name},hour_decimals=3")
        assert [e.time_s for e in generated.events] == [e.time_s for e in real.events]
        assert [e.kind for e in generated.events] == [e.kind for e in real.events]
        # node identities differ, which the artifact's node-count models cannot see
        for policy in ("oobleck", "varuna"):
            a = simulate(SimConfig.of(policy=policy, model="GPT-3-medium", trace=name), trace=real).summary
            b = simulate(SimConfig.of(policy=policy, model="GPT-3-medium", trace=name), trace=generated).summary
            assert a.committed_samples == b.committed_samples and a.avg_samples_per_s == b.avg_samples_per_s
