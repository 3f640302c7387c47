"""A stand-in for `srun` that starts the step's tasks as local processes.

Understands the options deploy/slurm/ooblab.sbatch uses (--nodes, --ntasks,
--ntasks-per-node, --kill-on-bad-exit, --output with %n / %t) and refuses any other, so a
change to the script's srun line cannot pass unnoticed. Task i gets SLURM_NODEID,
SLURM_PROCID = i (one task per "node"); SIGTERM and SIGINT are passed to every task; the
exit status is the highest of the tasks', as srun's is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

WITH_VALUE = {"--nodes", "--ntasks", "--ntasks-per-node", "--output", "--kill-on-bad-exit"}
FLAGS: set[str] = set()


def parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    options: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        name, eq, value = argv[i].partition("=")
        if name in FLAGS:
            options[name] = "1"
        elif name in WITH_VALUE:
            if not eq:
                i += 1
                value = argv[i]
            options[name] = value
        else:
            sys.exit(f"stub srun: unsupported option {argv[i]}")
        i += 1
    return options, argv[i:]


def main() -> int:
    options, command = parse(sys.argv[1:])
    if not command:
        sys.exit("stub srun: no command")
    nodes = int(options.get("--nodes", "1"))
    if int(options.get("--ntasks", nodes)) != nodes or options.get("--ntasks-per-node", "1") != "1":
        sys.exit("stub srun: only one task per node is emulated")
    tasks = []
    for node in range(nodes):
        env = {**os.environ, "SLURM_NODEID": str(node), "SLURM_PROCID": str(node), "SLURM_LOCALID": "0"}
        pattern = options.get("--output")
        out = open(pattern.replace("%n", str(node)).replace("%t", str(node)), "w") if pattern else None
        tasks.append(subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT if out else None))

    def forward(signum, frame):
        for task in tasks:
            if task.poll() is None:
                task.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    return max(task.wait() for task in tasks)


if __name__ == "__main__":
    sys.exit(main())
