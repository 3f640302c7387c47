"""Every key of the coordinator's store, spelled once (both sides build keys only here).

    job                      the RunConfig (JSON), layer times (emulated), injections
    workers/count            registration counter; workers/<id> = WorkerInfo (JSON)
    hb/<id>                  the worker's heartbeat counter (the coordinator watches it change)
    error/<id>               a worker's fatal traceback (errors/count counts them)
    fence/<id>               the coordinator fenced this worker: it must exit (its launcher kills it)
    abort                    set by the coordinator: workers exit at once (the job failed)
    orders/next, orders/<n>  the coordinator's orders, in sequence: run generation g, save
                             layers to a checkpoint, end (workers read them in order)
    ended                    workers that read the end order (a counter)
    gen<g>/directive         generation g: layout, rank -> worker, resume step, layer sources
    gen<g>/built/<rank>      rank joined the generation's groups (wall-clock seconds)
    gen<g>/ready/<rank>      rank holds its layers (after copies) and waits for go
    gen<g>/go                "run" | "stop" | "abort", set by the coordinator
    gen<g>/step<k>/<rank>    rank's gradients of step k are synchronised: {"t", "loss_sum"}
    gen<g>/acks/<k>          ranks that reached step k's commit point (a counter)
    gen<g>/commit/<k>        "ok" | "stop" (committed; stop after it) | "abort" (`commit`)
    gen<g>/stopreq           the coordinator asks to stop at the next commit (a join)
    gen<g>/fault/<rank>      rank's error in this generation; gen<g>/faults counts them
    gen<g>/resume            after a failure: the first uncommitted step (the coordinator's)
    gen<g>/left/<rank>       rank tore down: what it holds and for which step
    gen<g>/straggled/<rank>  rank was still blocked a while after its abort watch fired:
                             where (its stack), and how many connections it then severed
    gen<g>/done/<rank>       rank finished training, saved and tore its groups down
    gen<g>/pg/...            torch.distributed's own rendezvous (PrefixStore "gen<g>/pg")
    ckpt/g<g>.a<a>/<k>/<l>   layer l of the checkpoint of step k is durable on disk; g: the
                             generation that took it, a: its attempt (0: the periodic one,
                             n >= 1: the coordinator's n-th on-demand save)
    ckpt/g<g>.a<a>/<k>/failed, .../failed/<n>
                             writers that failed it (a counter) and the n-th one's reason
    inject/<i>               injection i fired (the victim's wall-clock time)
    size/<l>                 layer l's flattened state size (values), set by its owners
                             when a generation takes in-memory copies
    gen<g>/copy/<k>          ranks whose in-memory copy of step k is complete (a counter:
                             its own layers and all it receives are in its node's memory)

Every generation gets a fresh key prefix, so reconfiguration rebuilds process groups
without stale keys colliding, and a fenced worker cannot rejoin an old generation.

All of the above live under the job's secret prefix (`JobSecret.key_prefix`; both sides
reach the store only through `transport`, which applies it), apart from other jobs' keys.
`job`, `workers/<id>`, `orders/<n>` and `gen<g>/directive` are signed (`rendezvous.put_signed`).
A job bound to a network address is reached only through its gate (`gate`), which admits
holders of the secret; a loopback job's store is reached straight, and its one public key:

    ooblab/secret-check      the secret's check value (a wrong secret is refused at once)
"""

from __future__ import annotations

JOB = "job"
WORKER_COUNT = "workers/count"
ERROR_COUNT = "errors/count"
ABORT = "abort"
ORDER_NEXT = "orders/next"
CHECK = "ooblab/secret-check"  # public: outside the job's prefix (a loopback job's store)
ENDED = "ended"  # workers that read the end order (the coordinator waits for them before it closes)


def order_key(n: int) -> str:
    return f"orders/{n}"


def worker_key(worker_id: int) -> str:
    return f"workers/{worker_id}"


def heartbeat_key(worker_id: int) -> str:
    return f"hb/{worker_id}"


def error_key(worker_id: int) -> str:
    return f"error/{worker_id}"


def fence_key(worker_id: int) -> str:
    return f"fence/{worker_id}"


def _gen(generation: int) -> str:
    return f"gen{generation}"


def directive_key(generation: int) -> str:
    return f"{_gen(generation)}/directive"


def built_key(generation: int, rank: int) -> str:
    return f"{_gen(generation)}/built/{rank}"


def ready_key(generation: int, rank: int) -> str:
    return f"{_gen(generation)}/ready/{rank}"


def go_key(generation: int) -> str:
    return f"{_gen(generation)}/go"


def step_key(generation: int, step: int, rank: int) -> str:
    return f"{_gen(generation)}/step{step}/{rank}"


def acks_key(generation: int, step: int) -> str:
    return f"{_gen(generation)}/acks/{step}"


def commit_key(generation: int, step: int) -> str:
    return f"{_gen(generation)}/commit/{step}"


def stop_request_key(generation: int) -> str:
    return f"{_gen(generation)}/stopreq"


def fault_key(generation: int, rank: int) -> str:
    return f"{_gen(generation)}/fault/{rank}"


def fault_count_key(generation: int) -> str:
    return f"{_gen(generation)}/faults"


def resume_key(generation: int) -> str:
    return f"{_gen(generation)}/resume"


def left_key(generation: int, rank: int) -> str:
    return f"{_gen(generation)}/left/{rank}"


def straggled_key(generation: int, rank: int) -> str:
    return f"{_gen(generation)}/straggled/{rank}"


def done_key(generation: int, rank: int) -> str:
    return f"{_gen(generation)}/done/{rank}"


def pg_prefix(generation: int) -> str:
    return f"{_gen(generation)}/pg"


def _ckpt(generation: int, attempt: int, step: int) -> str:
    return f"ckpt/g{generation}.a{attempt}/{step}"


def layer_key(generation: int, attempt: int, step: int, layer: int) -> str:
    """Layer `layer` of attempt `attempt` at the checkpoint of step `step`, taken in
    generation `generation`, is durable on disk. Scoped so that reports of an aborted
    generation or an earlier attempt never complete a later checkpoint of the same step."""
    return f"{_ckpt(generation, attempt, step)}/{layer}"


def ckpt_failures_key(generation: int, attempt: int, step: int) -> str:
    """How many writers failed this checkpoint (a counter)."""
    return f"{_ckpt(generation, attempt, step)}/failed"


def ckpt_failure_key(generation: int, attempt: int, step: int, n: int) -> str:
    """The reason of the n-th (from 1) writer that failed this checkpoint."""
    return f"{_ckpt(generation, attempt, step)}/failed/{n}"


def fired_key(index: int) -> str:
    return f"inject/{index}"


def layer_size_key(layer: int) -> str:
    """The number of values in layer `layer`'s flattened state (`layer_state.flatten`)."""
    return f"size/{layer}"


def copy_done_key(generation: int, step: int) -> str:
    """Ranks of generation `generation` whose in-memory copy of step `step` is complete."""
    return f"{_gen(generation)}/copy/{step}"
