"""What the coordinator and the workers agree on: the store's keys (`keys`, the only place
a key is spelled), connecting, JSON values and orders (`rendezvous`), the atomic commit
of a step (`commit`), a generation's orders (`directive`: `layout`, layer `sources`, the
checkpoint `manifest`), and `--inject` entries (`failures`).

Both sides import this package; it imports nothing of theirs (only `real.config`)."""
