"""The machine's CPU counters read at each commit (`real.control.cpu_meter`) and the
per-iteration busy shares of the run summary."""

from __future__ import annotations

import os
import time

import pytest

from real.config import RunConfig
from real.control.cpu_meter import CpuReading, busy_share, parse_proc_stat, read_cpu, steal_share
from real.control.outcome import RunOutcome
from real.control.results import cpu_shares

STAT = """cpu  100 5 50 800 40 3 2 12 7 0
cpu0 50 2 25 400 20 1 1 6 3 0
intr 12345
"""


def test_the_aggregate_line_gives_busy_total_and_stolen_ticks():
    # busy: user nice system irq softirq steal = 100+5+50+3+2+12; idle + iowait = 840; guest is inside user
    assert parse_proc_stat(STAT) == CpuReading(172, 1012, 12)
    # a kernel without the steal column: nothing stolen
    assert parse_proc_stat("cpu  100 5 50 800 40 3 2\n") == CpuReading(160, 1000, 0)
    with pytest.raises(ValueError, match="no aggregate 'cpu' line"):
        parse_proc_stat("cpu0 1 2 3 4 5\n")


def test_a_busy_share_needs_two_readings_and_ticks_between_them():
    a, b = CpuReading(100, 1000), CpuReading(160, 1100)
    assert busy_share(a, b) == pytest.approx(0.6)
    assert busy_share(a, a) is None and busy_share(None, b) is None and busy_share(a, None) is None
    assert busy_share(a, CpuReading(300, 1100)) == 1.0  # clamped: the counters of a core that went offline
    # the host's steal, a part of the busy share
    stolen = CpuReading(100, 1000, 30), CpuReading(160, 1100, 45)
    assert steal_share(*stolen) == pytest.approx(0.15) and busy_share(*stolen) == pytest.approx(0.6)
    assert steal_share(a, a) is None and steal_share(None, b) is None


def test_unreadable_counters_are_none_not_an_error(tmp_path):
    assert read_cpu(str(tmp_path / "missing")) is None
    (tmp_path / "stat").write_text("intr 1 2 3\n")
    assert read_cpu(str(tmp_path / "stat")) is None


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="no /proc/stat here")
def test_this_process_burning_a_core_shows_in_the_machines_busy_ticks():
    ticks = os.sysconf("SC_CLK_TCK")
    before, cpu0 = read_cpu(), time.process_time()
    while time.process_time() - cpu0 < 0.5:
        pass
    after, burned_s = read_cpu(), time.process_time() - cpu0
    assert before is not None and after is not None
    # every process's ticks count, ours among them (tick granularity: 10 ms)
    assert after.busy_ticks - before.busy_ticks >= 0.8 * burned_s * ticks
    share = busy_share(before, after)
    assert share is not None and 0 < share <= 1


def test_the_summary_has_one_share_per_committed_iteration_in_order():
    out = RunOutcome(RunConfig(nodes=2, fault_tolerance=1, steps=3), t0_wall=0.0)
    out.ready_s = 2.0
    out.step_end_s = [3.0, 4.0, 5.0]
    out.cpu_at_s = {
        2.0: CpuReading(0, 0),
        3.0: CpuReading(50, 200),
        4.0: CpuReading(150, 400),
        5.0: None,
        9.0: CpuReading(0, 0),  # a rolled-back step's reading: not part of the run any more
    }
    assert cpu_shares(out) == [pytest.approx(0.25), pytest.approx(0.5), None]
    out.cpu_at_s[4.0] = CpuReading(150, 400, 20)
    assert cpu_shares(out, steal_share) == [0.0, pytest.approx(0.1), None]
    out.ready_s = None
    assert cpu_shares(out) == []
