"""The real backend: the planner's plans executed by real processes on torch.distributed.

Processes: one coordinator (`coordinator`: hosts the TCPStore, runs the policy, publishes
generations, watches heartbeats, exit statuses and commits; `recovery_flow`: what happens
after a failure or a planned stop; `membership`: who is alive, fencing; `schedule`: trace
and timed failures) and one worker per GPU (`worker`: registers and follows the
coordinator's orders; `session`: joins a generation, restores its layers, trains, survives
failures). `launch` starts them on one machine or one node; `cli` exposes `ooblab run |
coordinator | node | worker | profile`.

Failures: `commit` (the atomic commit of a step through the store), `state` (a layer's
parameters and AdamW state), `transfers` (where each layer of a new generation comes
from), `exchange` (the point-to-point copies), `checkpoint` (atomic, asynchronous),
`directive` (what a generation is told), `control` (the simulator's policies, plans as
layouts), `failures` and `probe` (`--inject` schedules and the worker's failure points),
`trace_replay`, `recovery` (where a recovery's time goes), `outcome`.

Pieces: `config` (what to run), `planning` (profile, cluster and plan, one-GPU stages),
`layout` (plan -> ranks, pipelines, owner-set sync groups), `rendezvous` (store keys,
registration, heartbeats), `groups` (one generation's process groups), `stage_runner`
(pipelining 1F1B + weighted gradient sync + AdamW), `gradsync`, `tinygpt` (the model and
its data), `emulated` (sleeping layers), `results` (the shared run record), `profiler`,
`reference` (single-process training and comparison) and `baseline` (plain pipelining +
DDP-style averaging, for the overhead benchmark).

`real` imports planner (and may import traces), never sim or simpy.
"""
