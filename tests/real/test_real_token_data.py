"""Token data from a local file (real/models/tokens.py): batches are a pure function of
(seed, step) over the file, bad files are one line naming the problem, and a job trained
on a file through a crash equals one process trained on the same file."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from real.config import ConfigError, RunConfig
from real.models import tokens
from real.models.reference import gather_params, max_relative_difference, train_reference

from .conftest import ooblab


def corpus(path: Path, n: int = 5000, vocab: int = 128, dtype: str = "uint16") -> tokens.TokenFile:
    """A small generated corpus: a seeded walk over the vocabulary (something to learn)."""
    steps = np.random.default_rng(0).integers(1, 4, n)
    tokens.write(path, np.cumsum(steps) % vocab, dtype)
    return tokens.TokenFile(str(path), dtype)


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_a_step_batch_is_a_window_of_the_file_fixed_by_seed_and_step(tmp_path, dtype):
    data = corpus(tmp_path / "c.bin", dtype=dtype)
    ids = np.fromfile(data.path, dtype=tokens.TOKEN_DTYPES[dtype]).astype(np.int64)
    x, y = tokens.batch(data, 16, seed=3, step=5, num_samples=6)
    assert x.shape == y.shape == (6, 16) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    for row in x.numpy():  # each row is a window of the file
        starts = [s for s in range(len(ids) - 16) if np.array_equal(ids[s : s + 16], row)]
        assert starts
    again = tokens.batch(data, 16, seed=3, step=5, num_samples=6)
    assert torch.equal(again[0], x)
    assert not torch.equal(tokens.batch(data, 16, seed=3, step=6, num_samples=6)[0], x)
    assert tokens.check(data, vocab=128, seq_len=16) == 5000


def test_bad_files_are_named(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        tokens.check(tokens.TokenFile(str(tmp_path / "none.bin")), 128, 16)
    (tmp_path / "odd.bin").write_bytes(b"\x01\x00\x02")
    with pytest.raises(ConfigError, match="3 bytes is not a whole number of uint16 tokens"):
        tokens.check(tokens.TokenFile(str(tmp_path / "odd.bin")), 128, 16)
    short = corpus(tmp_path / "short.bin", n=10)
    with pytest.raises(ConfigError, match="10 tokens, fewer than one sample of 17"):
        tokens.check(short, 128, 16)
    wide = corpus(tmp_path / "wide.bin", vocab=300)
    with pytest.raises(ConfigError, match="token id 299 is past the model's vocabulary of 128"):
        tokens.check(wide, 128, 16)
    with pytest.raises(ConfigError, match="uint16, uint32"):
        tokens.TokenFile("x.bin", "int8")


@pytest.mark.timeout(300)
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="the [hf] extra is not installed")
def test_a_job_on_a_token_file_through_a_crash_equals_one_process(tmp_path):
    """GPT-2 (tiny) on a generated corpus, a 1-node and a 3-node pipeline, a worker crashing
    as step 2 begins its forward: after the reconfiguration the job continues at the samples the step
    would have had, so every parameter and loss equals one process's run on the file."""
    data = corpus(tmp_path / "corpus.bin")
    params_dir = tmp_path / "params"
    args = ["run", "--model", "hf:gpt2:tiny", "--data", data.path, "--nodes", "4", "--f", "1", "--pipelines", "1,3",
            "--steps", "4", "--global-batch", "8", "--dtype", "float64", "--timeout", "30", "--heartbeat-timeout", "10",
            "--heartbeat-interval", "0.25", "--inject", "2:node3:crash:forward", "--save-params", str(params_dir),
            "--out", str(tmp_path / "run"), "--json"]  # fmt: skip
    result = ooblab(args, timeout_s=240)
    summary = result.json()
    assert result.returncode == 0 and summary["status"] == "finished", summary.get("reason") or result.stderr[-4000:]
    assert summary["injections_fired"] == [0]
    reference = train_reference(
        RunConfig(model="hf:gpt2:tiny", data=data.path, nodes=4, steps=4, global_batch=8, dtype="float64")
    )
    worst = max(max_relative_difference(p, reference.params) for p in gather_params(params_dir).values())
    assert worst <= 1e-9 and summary["losses"] == pytest.approx(reference.losses, rel=1e-9)
    synthetic = train_reference(RunConfig(model="hf:gpt2:tiny", nodes=4, steps=4, global_batch=8, dtype="float64"))
    assert synthetic.losses != pytest.approx(reference.losses, rel=1e-6)  # the file is what it trained on
