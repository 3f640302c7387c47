"""The control side (one coordinator per job): generations and watching (`coordinator`),
what happens between two generations (`recovery_flow`, on the job's state in `job`),
liveness and fencing (`membership`), trace and timed failures (`schedule`,
`trace_replay`), the policies and their plans as layouts (`policies`, `planning`), and
what the run produced (`outcome`, `recovery`, `results`). Never imports `real.worker`."""
