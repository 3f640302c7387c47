"""The real backend: the planner's plans executed by real processes on torch.distributed.

Processes: one coordinator (`coordinator`: hosts the TCPStore, plans, publishes, watches
heartbeats and step reports) and one worker per GPU (`worker`: registers, joins the
generation's process groups, trains its stage). `launch` starts them on one machine or one
node; `cli` exposes `ooblab run | coordinator | node | worker | profile`.

Pieces: `config` (what to run), `planning` (profile, cluster and plan, one-GPU stages),
`layout` (plan -> ranks, pipelines, owner-set sync groups), `rendezvous` (store keys,
registration, heartbeats), `groups` (one generation's process groups), `stage_runner`
(pipelining 1F1B + weighted gradient sync + AdamW), `gradsync`, `tinygpt` (the model and
its data), `emulated` (sleeping layers), `results` (the shared run record), `profiler`,
`reference` (single-process training and comparison) and `baseline` (plain pipelining +
DDP-style averaging, for the overhead benchmark).

`real` imports planner (and may import traces), never sim or simpy.
"""
