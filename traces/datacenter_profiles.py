"""Failure profiles of the datacenter generator (`traces.datacenter`), calibrated to Llama 3.

Published (Dubey et al. 2024, "The Llama 3 Herd of Models", section 3.3.4 and Table 5):

* Llama 3 405B pre-training ran on 16,384 H100 GPUs; a 54-day snapshot of it saw 466 job
  interruptions, 47 planned (automated maintenance such as firmware upgrades, or operator
  actions such as configuration or dataset updates) and 419 unexpected; the paper puts
  about 78 % of the unexpected ones on confirmed or suspected hardware issues.
* Table 5 splits the 419 unexpected interruptions into 18 root-cause rows (`LLAMA3_TABLE`).
* Cluster (section 3.3.1): 8 GPUs per Grand Teton server; each rack holds 2 servers (16
  GPUs) under one Minipack2 top-of-rack (ToR) switch; 192 racks form a 3,072-GPU pod under
  cluster switches, 8 pods a 24K-GPU cluster (a three-layer Clos).

Arithmetic checked here (and in ``tests/traces/test_traces_datacenter.py``): the 18 counts
sum to 419, and every printed share equals count / 419 to the printed 0.1 % except the
first: Faulty GPU is printed as 30.1 % but 148 / 419 = 35.3 %. The printed shares sum to
94.9 %, so the misprint is in that share, not in the count. We use the counts (they give
the stated total). With them the GPU rows (faulty GPU, HBM3, SRAM, system processor,
silent data corruption, thermal interface + sensor) are 268 / 419 = 64.0 % (the text's
58.7 % is the sum of the printed shares), and everything but software bug, NCCL watchdog
timeouts and dependency is 356 / 419 = 85.0 % (the text says about 78 %).

What we model, and why. The 419 unexpected interruptions, not the 466: the 47 planned
ones are scheduled by the operator for the whole job, not a node lost at a random time, so
they have no place in a node add/remove trace. Each interruption becomes one burst (the
removals at one timestamp). The rows fold into five components, each with a scope (the
unit whose failure it is) and a repair time:

============  =========================================================  =====  ==========
component     Table 5 rows                                               count  scope
============  =========================================================  =====  ==========
``gpu``       faulty GPU 148, HBM3 72, SRAM 19, GPU system processor 17,   268  one GPU:
              silent data corruption 6, thermal interface + sensor 6            its host
``host``      host maintenance 32, NIC 7, SSD 3, power supply 3, server     53  one host
              chassis 2, IO expansion board 2, CPU 2, system memory 2
``cable``     network switch/cable 35, the half we assign to cables       17.5  one host
``switch``    network switch/cable 35, the half we assign to ToR switches 17.5  one rack
``software``  software bug 54, NCCL watchdog timeouts 7, dependency 2       63  one host
============  =========================================================  =====  ==========

Choices (ours, not published): the split of the network row between cables (one host cut
off) and ToR switches (the rack's hosts cut off together: the correlated bursts) is not in
the paper; we take half each. Software failures are modelled as the failing host leaving
the job until its processes restart (the trace has no way to say "whole job stalls"); the
two dependency interruptions are folded in with them. Silent data corruption counts as a
GPU fault (the paper's "suspected hardware"). A failure rate is per unit of its scope and
constant in time (a Poisson process per GPU, host or switch), calibrated as count /
(units x 54 days) on the Llama 3 cluster: 16,384 GPUs, 2,048 hosts, 1,024 racks; we keep
it as a mean time between failures per unit (``mtbf_d``), e.g. 16,384 x 54 / 268 = 3,301
days per GPU.

Repair times are assumptions (the paper gives none): log-normal with the median below and
sigma 1.0 (mean 1.65 x median): a GPU fault drains the host for a part swap and
re-validation, 24 h; a host component, 24 h; a cable or optic reseated or replaced, 4 h; a
ToR switch replaced, 8 h; a software failure, the host's processes restarted and health
checked, 15 min. Every figure here is a spec key (see `traces.datacenter_spec`), so other
assumptions are one key away.

The calibration takes every host as up, as the paper's job was; in generated traces a host
in repair cannot fail again (thinning), which with these repairs keeps about 10 of 2,048
hosts down on average and lowers the rate by about 0.5 %, well inside the checks below.

Results (``tests/traces/test_traces_datacenter.py``, 8 seeds at 16,384 GPUs x 54 days,
tolerances stated there): 7.76 interruptions per day pooled (published 7.76; seeds 381 to
463 interruptions against 419); shares gpu / host / cable / switch / software 64.4 / 12.6
/ 4.0 / 4.4 / 14.5 % (table 64.0 / 12.6 / 4.2 / 4.2 / 15.0 %); 4.4 % of bursts take two
hosts (the switch share, 4.2 %); ``llama3-hardware`` 6.63 per day (published 356 / 54 =
6.59).
"""

from __future__ import annotations

from dataclasses import dataclass

# -- published figures (Llama 3 paper, Table 5 and section 3.3) -----------------------------

LLAMA3_GPUS = 16_384
LLAMA3_DAYS = 54
LLAMA3_INTERRUPTIONS = 466
LLAMA3_PLANNED = 47
LLAMA3_UNEXPECTED = 419
LLAMA3_GPUS_PER_HOST = 8
LLAMA3_HOSTS_PER_RACK = 2  # "each rack hosts 16 GPUs split between two servers"


@dataclass(frozen=True)
class TableRow:
    """One root-cause row of Table 5: its count, the share printed beside it, our component."""

    category: str
    count: int
    printed_percent: float
    component: str


LLAMA3_TABLE: tuple[TableRow, ...] = (
    TableRow("Faulty GPU", 148, 30.1, "gpu"),
    TableRow("GPU HBM3 Memory", 72, 17.2, "gpu"),
    TableRow("Software Bug", 54, 12.9, "software"),
    TableRow("Network Switch/Cable", 35, 8.4, "network"),
    TableRow("Host Maintenance", 32, 7.6, "host"),
    TableRow("GPU SRAM Memory", 19, 4.5, "gpu"),
    TableRow("GPU System Processor", 17, 4.1, "gpu"),
    TableRow("NIC", 7, 1.7, "host"),
    TableRow("NCCL Watchdog Timeouts", 7, 1.7, "software"),
    TableRow("Silent Data Corruption", 6, 1.4, "gpu"),
    TableRow("GPU Thermal Interface + Sensor", 6, 1.4, "gpu"),
    TableRow("SSD", 3, 0.7, "host"),
    TableRow("Power Supply", 3, 0.7, "host"),
    TableRow("Server Chassis", 2, 0.5, "host"),
    TableRow("IO Expansion Board", 2, 0.5, "host"),
    TableRow("Dependency", 2, 0.5, "software"),
    TableRow("CPU", 2, 0.5, "host"),
    TableRow("System Memory", 2, 0.5, "host"),
)

SCOPES = ("gpu", "host", "rack")  # the unit one failure belongs to; a rack = its ToR switch


@dataclass(frozen=True)
class Component:
    """One failure class: what fails (``scope``), how often per unit, how long repair takes."""

    name: str
    scope: str  # "gpu": the GPU's host leaves; "host": that host; "rack": every host of the rack
    mtbf_d: float  # mean time between failures of one unit (GPU, host or ToR switch), days
    repair_median_h: float  # median of the log-normal repair time, hours


@dataclass(frozen=True)
class DatacenterProfile:
    """A calibrated failure model: components, repair spread and cluster topology."""

    name: str
    source: str
    components: tuple[Component, ...]
    repair_sigma: float = 1.0  # log-normal sigma of every repair time
    gpus_per_host: int = LLAMA3_GPUS_PER_HOST
    hosts_per_rack: int = LLAMA3_HOSTS_PER_RACK

    def component(self, name: str) -> Component:
        for comp in self.components:
            if comp.name == name:
                return comp
        raise KeyError(name)


def table_counts(table: tuple[TableRow, ...] = LLAMA3_TABLE) -> dict[str, int]:
    """Interruptions per component of the table (network not yet split)."""
    out: dict[str, int] = {}
    for row in table:
        out[row.component] = out.get(row.component, 0) + row.count
    return out


REPAIR_MEDIAN_H = {"gpu": 24.0, "host": 24.0, "cable": 4.0, "switch": 8.0, "software": 0.25}
SWITCH_SHARE = 0.5  # share of the network row put on ToR switches (assumption, see above)


def calibrate(
    table: tuple[TableRow, ...] = LLAMA3_TABLE,
    *,
    gpus: int = LLAMA3_GPUS,
    days: float = LLAMA3_DAYS,
    switch_share: float = SWITCH_SHARE,
    with_software: bool = True,
    name: str = "llama3",
) -> DatacenterProfile:
    """The profile whose expected interruptions on the calibration cluster are the table's."""
    counts = table_counts(table)
    hosts = gpus // LLAMA3_GPUS_PER_HOST
    racks = hosts // LLAMA3_HOSTS_PER_RACK
    split = {
        "gpu": ("gpu", counts["gpu"], gpus),
        "host": ("host", counts["host"], hosts),
        "cable": ("host", counts["network"] * (1 - switch_share), hosts),
        "switch": ("rack", counts["network"] * switch_share, racks),
        "software": ("host", counts["software"], hosts),
    }
    components = tuple(
        Component(key, scope, units * days / count, REPAIR_MEDIAN_H[key])
        for key, (scope, count, units) in split.items()
        if count > 0 and (with_software or key != "software")
    )
    total = sum(count for key, (_, count, _) in split.items() if with_software or key != "software")
    return DatacenterProfile(
        name=name,
        source=f"Llama 3 paper, Table 5: {total:g} interruptions, {gpus} GPUs, {days:g} days",
        components=components,
    )


DATACENTER_PROFILES: dict[str, DatacenterProfile] = {
    "llama3": calibrate(),  # all 419 unexpected interruptions
    "llama3-hardware": calibrate(with_software=False, name="llama3-hardware"),  # 356 of them
}
DEFAULT_DATACENTER_PROFILE = "llama3"
