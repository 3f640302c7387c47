"""A layer's training state and where it goes: parameters and AdamW state (`layer_state`),
per-rank sources of a new generation's layers (`transfers`), checkpoint files
(`checkpoint`). Imports only `protocol` (and `real.config`)."""
