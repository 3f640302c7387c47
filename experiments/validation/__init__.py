"""Validation: the simulator against the real backend on the same traces and profiles.

`spec` says what to validate, `calibrate` measures the backend's fixed overheads once,
independently of any trace, `runs` carries out one real run and its simulated twin,
`compare` turns the two into errors (pure functions), `report` runs a whole validation
and writes its files. `ooblab validate` (`experiments.validation.cli`) is the command.
"""
