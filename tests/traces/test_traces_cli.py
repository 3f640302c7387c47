"""``ooblab traces``: info, convert, generate, plot, fit, and clean errors."""

from __future__ import annotations

import argparse
import json

import pytest

import traces
from traces.cli import register

import _traces_oracle as oracle


def run(argv):
    parser = argparse.ArgumentParser(prog="ooblab")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["traces", *argv])
    return args.handler(args)


def test_info_json_matches_independent_figures(shared_dir, capsys):
    path = shared_dir / "traces/oobleck-artifact/g4dn-trace.csv"
    assert run(["info", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = oracle.summary([(t, k) for t, k, _ in oracle.read_event_csv(path)])
    for key in ("duration_s", "num_adds", "num_removes", "min_nodes", "max_nodes", "final_nodes", "largest_burst"):
        assert out[key] == want[key], key
    assert out["mean_nodes"] == pytest.approx(want["mean_nodes"])
    assert out["removals_per_hour"] == pytest.approx(want["removals_per_hour"])
    assert out["format"] == "events"


def test_info_text(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("0,add,a\n0,add,b\n3600000,remove,a\n7200000,add,c\n")
    assert run(["info", str(path)]) == 0
    text = capsys.readouterr().out
    assert "duration      2.00 h (7200 s" in text
    assert "4: 3 adds, 1 removes" in text
    assert "min 1 / mean 1.50 (time-weighted) / max 2" in text
    assert "removals/hour 0.50" in text
    assert "largest 1" in text


def test_info_on_a_generator_spec(capsys):
    assert run(["info", "fixed:interval=30m", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["num_adds"], out["num_removes"], out["final_nodes"], out["duration_s"]) == (30, 15, 15, 15 * 1800)


def test_errors_exit_2_with_file_and_line(tmp_path, capsys):
    path = tmp_path / "bad.csv"
    path.write_text("0,add,a\n10,remove,b\n")
    assert run(["info", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ooblab traces info: error: ") and f"{path}:2: removes 'b'" in err
    assert run(["info", str(path), "--format", "yaml"]) == 2
    assert "unknown trace format 'yaml'" in capsys.readouterr().err
    assert run(["generate", "spot:speed=3"]) == 2
    assert "unknown key 'speed'" in capsys.readouterr().err


def test_repair_flag_reports_on_stderr(tmp_path, capsys):
    path = tmp_path / "log.csv"
    path.write_text("0,5\n60,4\n60,4\n30,3\n")
    assert run(["info", str(path), "--format", "counts-s"]) == 2
    capsys.readouterr()
    assert run(["info", str(path), "--format", "counts-s", "--repair", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["final_nodes"] == 4
    assert "out of order (lines 4)" in captured.err and "dropped 1 exact duplicate" in captured.err


def test_convert_round_trips_and_transforms(shared_dir, tmp_path, capsys):
    source = shared_dir / "traces/bamboo/traces/gcloud/a100x1-east1b.txt"
    out = tmp_path / "gcp.csv"
    assert run(["convert", str(source), "-o", str(out), "--seed", "4"]) == 0
    import numpy as np

    assert traces.load(out).events == traces.load(source, rng=np.random.default_rng(4)).events
    scaled = tmp_path / "scaled.csv"
    assert (
        run(
            [
                "convert",
                str(source),
                "-o",
                str(scaled),
                "--window",
                "1h",
                "5h",
                "--rescale",
                "15",
                "30",
                "--cap",
                "28",
                "--compress",
                "60",
            ]
        )
        == 0
    )
    s = traces.load(scaled).stats()
    assert s.max_nodes <= 28 and s.min_nodes >= 15 and s.end_s <= 4 * 60
    capsys.readouterr()
    assert run(["convert", str(source), "-o", "-"]) == 0
    assert capsys.readouterr().out.startswith("0,add,node1\n")


def test_generate_writes_the_paper_trace(shared_dir, tmp_path):
    out = tmp_path / "10m.csv"
    assert run(["generate", "fixed:interval=10m,hour_decimals=3", "-o", str(out)]) == 0
    real = oracle.read_event_csv(shared_dir / "traces/oobleck-artifact/10m.csv")
    assert [(t, k) for t, k, _ in oracle.read_event_csv(out)] == [(t, k) for t, k, _ in real]


def test_plot_writes_an_image(tmp_path):
    out = tmp_path / "live.png"
    assert run(["plot", "spot:nodes=10,hours=6,seed=2", "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fit_prints_the_comparison(shared_dir, capsys):
    assert run(["fit", "--shared", str(shared_dir / "traces")]) == 0
    out = capsys.readouterr().out
    for name in ("p3", "g4dn", "gcp-a100"):
        assert f"{name}: fitted to" in out
    assert out.count("shipped constants in traces/spot_profiles.py match this fit") == 3


def test_the_ooblab_command_has_traces(capsys):
    from ooblab.cli import main

    assert main(["traces", "info", "fixed:interval=1h,nodes=4,removals=2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["final_nodes"] == 2
