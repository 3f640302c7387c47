"""Text to train on: a UTF-8 file tokenised once, with a tokenizer from a local directory.

`ooblab run --text FILE --tokenizer DIR` (or `ooblab coordinator`): before any worker
starts, the coordinator loads the tokenizer saved in DIR (transformers'
`AutoTokenizer.from_pretrained(DIR, local_files_only=True)`: nothing is downloaded),
tokenises FILE and writes the ids as a flat binary in the run directory (`tokens.bin`,
uint16 when the tokenizer's vocabulary fits, else uint32); the run then trains on that
binary exactly as on `--data` (`real.models.tokens`), so every rank builds any step's batch
by itself and a resumed run continues at the right sample. The file is read line by line
and encoded in chunks of whole lines (about `CHUNK_CHARS` characters), without special
tokens, so a large corpus never sits in memory twice; the ids are those of encoding each
chunk alone (a tokenizer that merges across a newline would differ there).
"""

from __future__ import annotations

import codecs
import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..config import ConfigError, RunConfig

CHUNK_CHARS = 1 << 20
TOKENS_FILE = "tokens.bin"


def load_tokenizer(directory: str) -> Any:
    """The tokenizer saved in `directory`; one line naming the problem otherwise."""
    if not Path(directory).is_dir():
        raise ConfigError(
            f"--tokenizer {directory}: no such directory; nothing is downloaded: save a tokenizer there "
            "(tokenizer.save_pretrained(DIR)) and pass DIR"
        )
    if not any(Path(directory).iterdir()):
        raise ConfigError(
            f"--tokenizer {directory}: the directory is empty; save a tokenizer there (tokenizer.save_pretrained(DIR))"
        )
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ConfigError("--tokenizer needs transformers: pip install -e '.[hf]'") from None
    try:
        return AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - transformers fails on a bad directory in many ways
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"--tokenizer {directory}: cannot load a tokenizer from it ({first})") from None


def tokenize(
    text_path: str, tokenizer: Any, out_path: Path, vocab: int | None = None, *, checked: bool = False
) -> tuple[Path, str, int]:
    """Write the ids of `text_path` to `out_path`; (path, dtype, token count). `vocab`: the
    model's vocabulary, which must hold every id the tokenizer can give; `checked`: the
    text is known to be UTF-8 already (`check_utf8`)."""
    source = Path(text_path)
    if not source.is_file():
        raise ConfigError(f"--text {text_path}: no such file")
    size = len(tokenizer)
    if vocab is not None and size > vocab:
        raise ConfigError(
            f"--tokenizer's vocabulary has {size} tokens, the model's {vocab}: pick a model whose vocabulary "
            "holds it (hf:FAMILY:DIR with a config.json whose vocab_size is at least that)"
        )
    dtype = "uint16" if size <= 1 << 16 else "uint32"
    if not checked:
        check_utf8(source)
    count = 0
    with open(source, encoding="utf-8") as text, open(out_path, "wb") as out:
        chunk: list[str] = []
        chars = 0
        for line in text:
            chunk.append(line)
            chars += len(line)
            if chars >= CHUNK_CHARS:
                count += _write(tokenizer, "".join(chunk), out, dtype)
                chunk, chars = [], 0
        if chunk:
            count += _write(tokenizer, "".join(chunk), out, dtype)
    if count == 0:
        raise ConfigError(f"--text {text_path}: no tokens in it")
    return out_path, dtype, count


def check_utf8(source: Path, block_bytes: int = 1 << 20) -> None:
    """Refuse a text that is not UTF-8, naming the line, before any token is written (a
    refusal then leaves no partial token file behind)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    line = 1
    with open(source, "rb") as raw:
        while block := raw.read(block_bytes):
            try:
                decoder.decode(block)
            except UnicodeDecodeError as exc:
                line += block[: exc.start].count(b"\n")
                raise ConfigError(f"--text {source}:{line}: not UTF-8 text") from None
            line += block.count(b"\n")
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise ConfigError(f"--text {source}: ends inside a UTF-8 character (not UTF-8 text)") from None


def _write(tokenizer: Any, text: str, out: Any, dtype: str) -> int:
    ids = np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=dtype)
    ids.tofile(out)
    return len(ids)


def prepare(config: RunConfig, run_dir: str | Path | None, vocab: int | None) -> RunConfig:
    """`config` training on its text's token binary (written under `run_dir`, else a new
    temporary directory); a config without `text` as it is."""
    if config.text is None:
        return config
    if config.tokenizer is None:
        raise ConfigError("--text needs --tokenizer DIR (a tokenizer saved in a local directory)")
    tokenizer = load_tokenizer(config.tokenizer)  # the inputs first: a refusal makes no directory
    if Path(config.text).is_file():
        check_utf8(Path(config.text))
    directory = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="ooblab-tokens-"))
    directory.mkdir(parents=True, exist_ok=True)
    path, dtype, _ = tokenize(config.text, tokenizer, directory / TOKENS_FILE, vocab, checked=True)
    return dataclasses.replace(config, data=str(path.resolve()), data_dtype=dtype)
