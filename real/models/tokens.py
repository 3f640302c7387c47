"""Token data from a local file: a flat binary of token ids, as nanoGPT's and Megatron-style
preprocessing write them (`np.uint16` for vocabularies up to 65,536, else `np.uint32`).

Step k's global batch is a pure function of (seed, k): sample i is the seq_len + 1 tokens
starting at an offset drawn from a generator seeded by (seed, k), inputs its first seq_len
and targets its last. So every rank builds any step's batch by itself, and a run that
restarts or reconfigures at step k continues at exactly the samples step k would have had.
The file is memory-mapped, never read whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from ..config import TOKEN_DTYPE_NAMES, ConfigError

TOKEN_DTYPES = {name: np.dtype(name).type for name in TOKEN_DTYPE_NAMES}


@dataclass(frozen=True)
class TokenFile:
    path: str
    dtype: str = "uint16"

    def __post_init__(self) -> None:
        if self.dtype not in TOKEN_DTYPES:
            raise ConfigError(f"token data dtype must be one of {', '.join(TOKEN_DTYPES)}, got {self.dtype!r}")


@lru_cache(maxsize=8)
def _tokens(path: str, dtype: str) -> np.ndarray:
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"token data {path}: no such file")
    size = np.dtype(TOKEN_DTYPES[dtype]).itemsize
    if file.stat().st_size == 0:
        raise ConfigError(f"token data {path}: the file is empty")
    if file.stat().st_size % size:
        raise ConfigError(f"token data {path}: {file.stat().st_size} bytes is not a whole number of {dtype} tokens")
    return np.memmap(file, dtype=TOKEN_DTYPES[dtype], mode="r")


def check(data: TokenFile, vocab: int, seq_len: int) -> int:
    """The number of tokens, after checking the file fits the model: at least one sample of
    seq_len + 1 tokens, no id at or above the vocabulary. One line naming the problem."""
    tokens = _tokens(data.path, data.dtype)
    if len(tokens) < seq_len + 1:
        raise ConfigError(f"token data {data.path}: {len(tokens)} tokens, fewer than one sample of {seq_len + 1}")
    top = int(tokens.max())
    if top >= vocab:
        raise ConfigError(f"token data {data.path}: token id {top} is past the model's vocabulary of {vocab}")
    return len(tokens)


def batch(data: TokenFile, seq_len: int, seed: int, step: int, num_samples: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets [num_samples, seq_len] (int64) of step `step`'s global batch."""
    tokens = _tokens(data.path, data.dtype)
    generator = torch.Generator().manual_seed(seed * 7_919 + step + 1)
    starts = torch.randint(0, len(tokens) - seq_len, (num_samples,), generator=generator).tolist()
    rows = np.stack([np.asarray(tokens[s : s + seq_len + 1], dtype=np.int64) for s in starts])
    sample = torch.from_numpy(rows)
    return sample[:, :-1].contiguous(), sample[:, 1:].contiguous()


def write(path: str | Path, ids: np.ndarray, dtype: str = "uint16") -> Path:
    """Write token ids as a flat binary (the format `batch` reads)."""
    path = Path(path)
    np.asarray(ids, dtype=TOKEN_DTYPES[dtype]).tofile(path)
    return path
