"""Bad input, subcommand by subcommand: one line naming the problem and exit 2, checked
before any work starts (no run, no worker, no listening socket); or, where running on is
right, a visible note. Each row is (argv, exit code, words the output must hold)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ooblab.cli import main

ROWS = [
    # trace specs
    (["traces", "info", "spot:seed=-1"], 2, "seed='-1' must be a whole number >= 0"),
    (["traces", "convert", "spot:hours=1", "--seed", "-3", "-o", "-"], 2, "--seed must be a whole number >= 0, got -3"),
    (["traces", "generate", "spot:hours=1", "--seed", "-3", "-o", "{tmp}/g.csv"], 2, "--seed must be a whole"),
    (["traces", "plot", "spot:hours=1", "--seed", "-3", "-o", "{tmp}/g.png"], 2, "--seed must be a whole"),
    (["run", "--seed", "-1", "--steps", "1"], 2, "seed must be a whole number >= 0, got -1"),
    (["reproduce", "designs", "--quick", "--costs", "nope"], 2, "unknown cost profile 'nope'"),
    (["simulate", "--costs", "h100-datacenter", "--no-write"], 2, "use --calibration planner"),
    (["run", "--join-horizon-s", "-5", "--steps", "1"], 2, "join_horizon_s must be positive, got -5.0"),
    (["validate", "--seed", "-1", "--quick"], 2, "seed must be a whole number >= 0, got -1"),
    (["traces", "info", "datacenter:gpus_per_host=0"], 2, "gpus_per_host='0' must be a whole number >= 1"),
    (["traces", "info", "datacenter:hosts_per_rack=0"], 2, "hosts_per_rack='0' must be a whole number >= 1"),
    (["traces", "info", "nosuch:x=1"], 2, "nosuch"),
    (["traces", "info", "spot:hours=1e9"], 2, "hours 1e+09 is past the bound of 8784"),
    (["traces", "info", "datacenter:days=1e6"], 2, "days 1e+06 is past the bound of 366"),
    (["traces", "info", "fixed:interval=1h,nodes=2000000"], 2, "nodes 2e+06 is past the bound"),
    (["traces", "info", "{tmp}/counts.csv", "--format", "counts-s"], 2, "past the bound of 1,000,000 nodes"),
    (["simulate", "--calibration", "planner", "--gpus-per-node", "100000", "--no-write"], 2, "past the bound of 1024"),
    (["traces", "convert", "fixed:interval=1h", "--cap", "0", "-o", "{tmp}/x.csv"], 2, "leave no event"),
    (["traces", "plot", "fixed:interval=1h", "-o", "{tmp}/x.xyz"], 2, "unknown figure format '.xyz'"),
    (["traces", "plot", "fixed:interval=1h", "-o", "{tmp}/nope/x.png"], 2, "nope does not exist"),
    (["traces", "generate", "fixed:interval=1h", "-o", "{tmp}/nope/x.csv"], 2, "nope does not exist"),
    (["traces", "convert", "fixed:interval=1h", "-o", "{tmp}"], 2, "is a directory; name a file"),
    (["reproduce", "cost", "--quick", "--out", "{tmp}/a-file", "--no-progress"], 2, "exists and is not a directory"),
    # plan
    (["plan", "--add", "1", "--join-horizon-s", "-5"], 2, "--join-horizon-s must be a number of seconds > 0"),
    (["plan", "--join-horizon-s", "100"], 2, "--join-horizon-s applies to --add only"),
    (["plan", "--throughput-tolerance", "0.1"], 2, "--throughput-tolerance applies to --remove only"),
    (["plan", "--f", "40"], 2, "f = 40"),
    (["plan", "--global-batch", "1"], 2, "with 1 microbatches"),
    (["plan", "--gpus-per-node", "1000", "--model", "gpt3-350m"], 2, "found no layout of its 26 layers"),
    (["plan", "--model", "gpt3-175b", "--nodes", "2"], 2, "model state is 2.55 TiB, the cluster has 30 GiB usable"),
    # simulate
    (["simulate", "--calibration", "bogus"], 2, "invalid choice: 'bogus'"),
    (["simulate", "--design", "nosuch", "--no-write"], 2, "unknown design 'nosuch'"),
    (
        ["simulate", "--design", "gemini", "--calibration", "planner", "--set", "replicas=100", "--no-write"],
        2,
        "replicas <= 29",
    ),
    (["simulate", "--calibration", "planner", "--fault-tolerance", "40", "--no-write"], 2, "fault_tolerance <= 29"),
    (["simulate", "--calibration", "planner", "--global-batch", "1", "--no-write"], 2, "cannot feed f + 1 = 2"),
    (["simulate", "--out", "{tmp}/a-file"], 2, "exists and is not a directory"),
    (["simulate", "--out", "/proc/no-such-dir/run"], 2, "cannot create it"),
    (["simulate", "--set", "min_nodes=1000", "--no-write"], 0, "never trained: 30 usable nodes"),
    (["simulate", "--duration-s", "1e12", "--no-write"], 2, "duration_s 1e+12 is past the bound"),
    (["simulate", "--duration-s", "100000", "--no-write"], 0, "last membership held for the last 12.78 h"),
    (["simulate", "--no-write"], 0, "its last instant ends the run: the 1 event(s) there are not processed"),
    (["simulate", "--trace", "{tmp}/unsorted.csv", "--no-write"], 2, "ooblab traces convert FILE --repair"),
    # a misspelt failure cause would be priced as none (detection 0 s instead of 60 s)
    (["simulate", "--trace", "{tmp}/caused.csv", "--no-write"], 2, "unknown cause 'GPU' of the removal of 'n1'"),
    (["traces", "info", "{tmp}/cosmic.csv"], 2, "unknown cause 'cosmic_ray'"),
    (["simulate", "--design-module", "{tmp}/nosuch.py", "--no-write"], 2, "nosuch.py: no such file"),
    (["simulate", "--design-module", "{tmp}/a-file", "--no-write"], 2, "a-file is not a .py file"),
    (["simulate", "--design-module", "{tmp}", "--no-write"], 2, "is a directory without an __init__.py"),
    # the real backend, before any worker starts or any port is opened
    (["run", "--nodes", "2", "--steps", "3", "--inject", "50:node1:crash"], 2, "step 50 is past the run's 3 steps"),
    (["run", "--nodes", "2", "--steps", "3", "--inject", "1:node9:crash"], 2, "unknown worker 'node9'"),
    (["run", "--nodes", "2", "--global-batch", "1", "--steps", "2"], 2, "cannot feed f + 1 = 2"),
    (["run", "--nodes", "2", "--steps", "2", "--model", "hf:gpt2:gpt2-medium"], 2, "nothing is downloaded"),
    (["run", "--nodes", "2", "--steps", "2", "--data", "{tmp}/nosuch.bin"], 2, "nosuch.bin: no such file"),
    (["coordinator", "--nodes", "2", "--global-batch", "1", "--port", "0"], 2, "cannot feed f + 1 = 2"),
    # sizes each within bound that multiply past what fits: refused before any event is drawn
    (["traces", "info", "spot:nodes=1000000,hours=8784"], 2, "events expected, past the bound of 5,000,000"),
    (["traces", "info", "datacenter:gpu_mtbf=1s"], 2, "events expected, past the bound of 5,000,000"),
    (["simulate", "--calibration", "planner", "--trace", "datacenter:gpu_mtbf=1s", "--no-write"], 2, "events expected"),
    (["traces", "info", "datacenter:spares=999999999"], 2, "hosts with spares 1e+09 is past the bound"),
    (
        ["simulate", "--design", "replica_groups", "--calibration", "planner", "--set", "groups=1000000", "--no-write"],
        2,
        "at most 30 groups can ever train",
    ),
    # a trace's horizon line: within the year, and one of them
    (["traces", "info", "{tmp}/horizon.csv"], 2, "horizon 1e+17 s is past the bound of 8784 hours"),
    (["traces", "info", "{tmp}/horizons.csv"], 2, "horizons.csv:5: a second horizon line (the first is line 4)"),
    # files read no further than their cap; JSON that the reader cannot take; values beyond any term
    (["traces", "info", "/dev/zero"], 2, "/dev/zero: larger than the 256 MiB that a trace file may be"),
    (["simulate", "--calibration", "planner", "--costs", "/dev/zero", "--no-write"], 2, "larger than the 1 MiB"),
    (["simulate", "--calibration", "planner", "--costs", "{tmp}/nested.json", "--no-write"], 2, "nested too deeply"),
    (["simulate", "--calibration", "planner", "--costs", "{tmp}/digits.json", "--no-write"], 2, "(400 characters)"),
    (["simulate", "--set", "price_per_node_hour=1e308", "--no-write"], 2, "of at most 1e+09 in size, got 1e+308"),
    (
        ["simulate", "--calibration", "planner", "--costs", "{tmp}/bom.json", "--no-write"],
        0,
        "no cause 5 s (profile bom)",
    ),
    # where a command writes, checked before its work: nothing made, one line
    (["simulate", "--out", "{tmp}/" + "x" * 300], 2, "is 300 bytes, past the file system's 255"),
    (["run", "--nodes", "2", "--steps", "2", "--out", "{tmp}/a-file/run"], 2, "a-file is a file, not a directory"),
    (["run", "--nodes", "2", "--steps", "2", "--checkpoint-dir", "{tmp}/a-file"], 2, "--checkpoint-dir"),
    (["validate", "--quick", "--out", "{tmp}/a-file"], 2, "--out {tmp}/a-file: exists and is not a directory"),
    (["profile", "--out", "{tmp}/a-file/p"], 2, "a-file is a file, not a directory"),
    # validate: settings that cannot work, refused before the calibration's minutes
    (["validate", "--duration-s", "10", "--time-scale", "5"], 2, "--duration-s and --time-scale both set"),
    (["validate", "--f", "10"], 2, "f = 10 needs 11 pipelines of at least one node and one sample each; 8 nodes"),
    (["validate", "--global-batch", "1"], 2, "a global batch of 1 cannot feed them"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("argv,code,words", ROWS, ids=[" ".join(r[0])[:60] for r in ROWS])
def test_bad_input_is_named(argv, code, words, tmp_path: Path, capsys):
    (tmp_path / "a-file").write_text("")
    (tmp_path / "counts.csv").write_text("x,count\n0,5\n10,1000000000\n")
    (tmp_path / "unsorted.csv").write_text("time_ms,event,node\n10,add,n0\n5,add,n1\n")
    (tmp_path / "caused.csv").write_text("time_ms,event,node\n0,add,n0\n0,add,n1\n5000,remove,n1,GPU\n9000,add,n2\n")
    (tmp_path / "cosmic.csv").write_text("0,add,n0\n0,add,n1\n5000,remove,n1,cosmic_ray\n")
    (tmp_path / "horizon.csv").write_text("0,add,n0\n0,add,n1\n5000,remove,n1\n# horizon_ms=1e20\n")
    (tmp_path / "horizons.csv").write_text("0,add,n0\n0,add,n1\n5000,remove,n1\n# horizon_ms=9000\n# horizon_ms=8000\n")
    (tmp_path / "nested.json").write_text("[" * 100_000 + "]" * 100_000)
    profile = {"format": "ooblab-costs", "version": 1, "name": "bom", "base": "paper"}
    value = {"value": "VALUE", "unit": "s", "source": "a test"}
    text = json.dumps({**profile, "costs": {"detect_s": value}})
    (tmp_path / "digits.json").write_text(text.replace('"VALUE"', "9" * 400))
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + text.replace('"VALUE"', "5").encode())
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    try:
        got = main(argv)
    except SystemExit as exc:  # argparse exits itself
        got = int(exc.code or 0)
    out = capsys.readouterr()
    assert got == code, (got, out.err[-500:])
    if code == 2:  # a refusal leaves nothing behind
        assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    text = out.err if code else out.out
    assert words.replace("{tmp}", str(tmp_path)) in text, text[-500:]
    if code:
        lines = [line for line in out.err.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in out.err, out.err


def test_simulate_says_when_out_replaces_an_earlier_run(tmp_path: Path, capsys):
    argv = ["simulate", "--out", str(tmp_path / "run")]
    assert main(argv) == 0 and "holds an earlier run" not in capsys.readouterr().err
    assert main(argv) == 0 and "holds an earlier run; its files are replaced" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_plan_past_the_search_limit_is_refused_in_one_line(monkeypatch, capsys):
    """5,000 nodes with two microbatches each ran for minutes; the search stops at its
    limit (here lowered to 2 s) with one line that names the limit and the way out."""
    import planner.mix

    monkeypatch.setattr(planner.mix, "SEARCH_LIMIT_S", 2.0)
    assert main(["plan", "--nodes", "5000", "--global-batch", "10000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "passed its limit of 2 s" in err and "a larger global batch" in err


def test_a_full_disk_under_stdout_is_one_line_and_exit_2():
    """`--json` into a device that takes no bytes: the write fails at the end, in one line."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "ooblab.cli", "simulate", "--no-write", "--json"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr == "ooblab simulate: error: standard output: no space left on the device\n"


def test_ctrl_c_while_the_subcommand_is_imported_is_one_line(monkeypatch, capsys):
    """The sub-command's imports (pandas, simpy, torch) take the first second: Ctrl-C then
    ends the command as it would later, one line and 130."""
    import ooblab.cli as cli

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["simulate", "--no-write"]) == 130
    assert capsys.readouterr().err == "ooblab simulate: interrupted\n"


def test_sigterm_ends_a_command_in_one_line_and_the_handler_is_put_back(monkeypatch, capsys):
    import ooblab.cli as cli

    def terminated(argv):
        os.kill(os.getpid(), signal.SIGTERM)  # delivered to the main thread before this returns
        raise AssertionError("SIGTERM did not end the command")

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(cli, "build_parser", terminated)
    assert cli.main(["traces", "info", "spot:hours=1"]) == 143
    assert capsys.readouterr().err == "ooblab traces: terminated\n"
    assert signal.getsignal(signal.SIGTERM) == before
