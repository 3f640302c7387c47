"""Text through a local tokenizer (real/models/text.py): the file's ids as the tokenizer
gives them, bad settings as one line, and a job on `--text` equal to one process trained on
the same ids. The tokenizer is made here (a word-level one over a generated corpus): these
machines cannot download one."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import numpy as np
import pytest

from ooblab.cli import main
from real.config import ConfigError, RunConfig
from real.models import text
from real.models.reference import gather_params, max_relative_difference, train_reference

from .conftest import ooblab
from .test_real_hf_models import saved_model

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="the [hf] extra is not installed"
)
WORDS = [f"w{i}" for i in range(90)]


def write_corpus(path: Path, lines: int = 400, seed: int = 0) -> Path:
    """Seeded sentences over WORDS, each a short walk (something a model can learn)."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        at = rng.randrange(len(WORDS))
        words = []
        for _ in range(rng.randint(4, 12)):
            words.append(WORDS[at])
            at = (at + rng.randint(1, 3)) % len(WORDS)
        out.append(" ".join(words) + " .")
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def save_tokenizer(directory: Path, words: list[str]) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, ".": 1, **{w: i + 2 for i, w in enumerate(words)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]").save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    return write_corpus(root / "corpus.txt"), save_tokenizer(root / "tokenizer", WORDS)


def test_the_file_becomes_the_tokenizers_ids_whatever_the_chunking(made, tmp_path, monkeypatch):
    corpus, directory = made
    tokenizer = text.load_tokenizer(str(directory))
    expected = tokenizer(corpus.read_text(), add_special_tokens=False)["input_ids"]
    path, dtype, count = text.tokenize(str(corpus), tokenizer, tmp_path / "whole.bin", vocab=128)
    assert dtype == "uint16" and count == len(expected) > 2000
    assert np.fromfile(path, dtype=np.uint16).tolist() == expected
    assert 0 not in expected, "every word is known: no [UNK]"
    monkeypatch.setattr(text, "CHUNK_CHARS", 100)  # many chunks of whole lines
    chunked, _, _ = text.tokenize(str(corpus), tokenizer, tmp_path / "chunked.bin", vocab=128)
    assert np.fromfile(chunked, dtype=np.uint16).tolist() == expected


def test_bad_text_settings_are_one_line(made, tmp_path):
    corpus, directory = made
    with pytest.raises(ConfigError, match="no such directory; nothing is downloaded"):
        text.load_tokenizer(str(tmp_path / "none"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="the directory is empty; save a tokenizer there"):
        text.load_tokenizer(str(tmp_path / "empty"))
    (tmp_path / "stray").mkdir()
    (tmp_path / "stray" / "notes.txt").write_text("not a tokenizer")
    with pytest.raises(ConfigError, match="cannot load a tokenizer from it"):
        text.load_tokenizer(str(tmp_path / "stray"))
    big = save_tokenizer(tmp_path / "big", [f"v{i}" for i in range(200)])
    with pytest.raises(ConfigError, match="vocabulary has 202 tokens, the model's 128"):
        text.tokenize(str(corpus), text.load_tokenizer(str(big)), tmp_path / "x.bin", vocab=128)
    with pytest.raises(ConfigError, match="--text .*none.txt: no such file"):
        text.tokenize(str(tmp_path / "none.txt"), text.load_tokenizer(str(directory)), tmp_path / "y.bin")
    with pytest.raises(ConfigError, match="--text and --tokenizer go together"):
        RunConfig(text=str(corpus))


def test_a_text_not_in_utf8_is_refused_by_line_and_leaves_no_token_file(made, tmp_path, capsys):
    corpus, directory = made
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"w1 w2 .\nw3 \xe9t\xe9 .\n")
    run_dir = tmp_path / "run"
    argv = ["run", "--model", "hf:gpt2:tiny", "--nodes", "2", "--steps", "1", "--compute", "real"]
    code = main([*argv, "--text", str(latin), "--tokenizer", str(directory), "--out", str(run_dir)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"ooblab run: error: --text {latin}:2: not UTF-8 text"], err
    assert not run_dir.exists()  # no directory, no 0-byte tokens.bin
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    assert main([*argv, "--data", str(empty), "--out", str(run_dir)]) == 2
    assert capsys.readouterr().err == f"ooblab run: error: token data {empty}: the file is empty\n"
    assert not run_dir.exists()


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--text", "CORPUS"], "--text and --tokenizer go together"),
        (["--text", "CORPUS", "--tokenizer", "TOK", "--data", "x.bin"], "pass one"),
        (["--text", "CORPUS", "--tokenizer", "TOK", "--compute", "emulated"], "feed real compute"),
    ],
)
def test_the_command_line_refuses_mixed_token_sources_in_one_line(made, extra, words, capsys, tmp_path):
    corpus, directory = made
    argv = [a.replace("CORPUS", str(corpus)).replace("TOK", str(directory)) for a in extra]
    code = main(["run", "--model", "hf:gpt2:tiny", "--nodes", "2", "--steps", "1", "--out", str(tmp_path / "r"), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0], err


@pytest.mark.timeout(240)
def test_a_job_on_text_trains_as_one_process_on_its_ids(made, tmp_path):
    """`ooblab run --model hf:gpt2:DIR --text FILE --tokenizer DIR`, what a user brings: a
    saved model (config.json and safetensors weights) and a text, tokenised once into the run
    directory; a 2-pipeline job of the tied GPT-2 equals one process trained on those ids
    from the same weights."""
    corpus, directory = made
    steps = 3
    out, params = tmp_path / "run", tmp_path / "params"
    model = f"hf:gpt2:{tmp_path / 'model'}"
    saved_model("gpt2", tmp_path / "model")
    result = ooblab(["run", "--model", model, "--text", str(corpus), "--tokenizer", str(directory),
                     "--nodes", "2", "--f", "1", "--steps", str(steps), "--global-batch", "4", "--dtype", "float64",
                     "--timeout", "30", "--heartbeat-timeout", "10", "--save-params", str(params), "--out", str(out),
                     "--json"], timeout_s=200)  # fmt: skip
    summary = result.json()
    assert result.returncode == 0 and summary["status"] == "finished", result.stderr[-3000:]
    ids = out / text.TOKENS_FILE
    assert ids.is_file()
    reference = train_reference(RunConfig(model=model, data=str(ids), steps=steps, global_batch=4,
                                          dtype="float64"))  # fmt: skip
    assert summary["losses"] == pytest.approx(reference.losses, rel=1e-9)
    worst = max(max_relative_difference(p, reference.params) for p in gather_params(params).values())
    assert worst <= 1e-9
    # from the saved weights: the first loss is transformers' own model's on step 0's batch
    import torch
    from transformers import GPT2LMHeadModel

    from real.models.family import trained
    from real.models.tinygpt import lm_loss

    config = RunConfig(model=model, data=str(ids), global_batch=4, dtype="float64")
    inputs, targets = trained(config).batch(config.seed, 0, 4)
    theirs = GPT2LMHeadModel.from_pretrained(tmp_path / "model", torch_dtype=torch.float64).eval()
    with torch.no_grad():
        assert summary["losses"][0] == pytest.approx(lm_loss(theirs(inputs).logits, targets).item(), rel=1e-9)
