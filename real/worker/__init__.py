"""The worker side (one process per GPU): registers and follows orders (`main`), runs a
generation and survives its failures (`session`), builds its process groups (`groups`),
trains a stage (`stage_runner`, `gradsync`), copies layers (`exchange`) and carries out
step-based injections (`probe`). Never imports `real.control`."""
