"""Hugging Face decoder models cut into the planner's layers (real/models/hf.py).

The oracle is transformers' own causal-LM model (`GPT2LMHeadModel`, `LlamaForCausalLM`)
holding the same weights: the planner's layers, whole or cut into stages anywhere, compute
exactly its logits (in float32: in float64 the Llama families' norms here keep float64
where transformers' round to float32, `hf.RMSNorm`), and a layer built alone has exactly the
weights it has in the whole model, so a stage can build only its own.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from real.config import ConfigError
from real.models import hf

needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="the [hf] extra is not installed"
)

FAMILIES = ("gpt2", "llama", "mistral", "qwen2")


def ids_for(shape: hf.HfShape, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, shape.vocab, (3, shape.seq_len), generator=torch.Generator().manual_seed(seed))


@needs_transformers
@pytest.mark.parametrize("family", FAMILIES)
def test_the_planner_layers_compute_the_transformers_model_exactly(family):
    shape = hf.parse(f"hf:{family}:tiny")
    layers = hf.build_layers(shape, 0, shape.num_layers, seed=5, dtype=torch.float32).eval()
    model = hf.as_transformers_model(shape, layers)
    ids = ids_for(shape)
    with torch.no_grad():
        assert torch.equal(layers(ids), model(ids).logits)
    # causal: the logits at position t do not see the tokens after t
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1) % shape.vocab
    with torch.no_grad():
        assert torch.equal(layers(ids)[:, :-1], layers(changed)[:, :-1])
        assert not torch.equal(layers(ids)[:, -1], layers(changed)[:, -1])


@needs_transformers
@pytest.mark.parametrize("family", FAMILIES)
def test_any_cut_into_stages_gives_the_same_logits_and_weights(family):
    shape = hf.parse(f"hf:{family}:tiny")
    whole = hf.build_layers(shape, 0, shape.num_layers, seed=7, dtype=torch.float64)
    ids = ids_for(shape, 1)
    with torch.no_grad():
        expected = whole(ids)
        for cut in range(1, shape.num_layers):
            first, second = (
                hf.build_layers(shape, a, b, 7, torch.float64) for a, b in ((0, cut), (cut, shape.num_layers))
            )
            assert torch.equal(second(first(ids)), expected)
    for index in range(shape.num_layers):
        alone = hf.build_layer(shape, index, 7, torch.float64).state_dict()
        inside = whole[index].state_dict()
        assert alone.keys() == inside.keys() and all(torch.equal(alone[k], inside[k]) for k in alone)
    other_seed = hf.build_layer(shape, 1, 8, torch.float64).state_dict()
    assert any(not torch.equal(other_seed[k], whole[1].state_dict()[k]) for k in other_seed)


@needs_transformers
@pytest.mark.parametrize("family", FAMILIES)
def test_the_single_process_model_trains_as_transformers_model_tied_or_not(family):
    """GPT-2's presets tie the head to the token embedding, Llama's do not, as those models
    do. The single-process model (`Trained.build_whole`, the backend's oracle) holds the
    tied pair as one tensor and trains, step for step under AdamW, exactly as transformers'
    model of the same weights: the tie is the one users know."""
    from real.config import TinyGptSpec
    from real.models.family import named

    shape = hf.parse(f"hf:{family}:tiny")
    assert shape.tied == (family == "gpt2")
    spec = named(f"hf:{family}:tiny", TinyGptSpec())
    ours = spec.build_whole(seed=3, dtype=torch.float32)
    theirs = hf.as_transformers_model(shape, ours).train()
    tied = ours[0].tokens.weight is ours[-1].logits.weight
    assert tied == shape.tied and sum(p.numel() for p in ours.parameters()) == theirs.num_parameters()
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (ours, theirs)]
    for step in range(3):
        ids = ids_for(shape, 10 + step)
        losses = []
        for model, optimizer in zip((ours, theirs), optimizers):
            optimizer.zero_grad()
            logits = model(ids) if model is ours else model(ids).logits
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, shape.vocab), ids[:, 1:].reshape(-1))
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        assert losses[0] == pytest.approx(losses[1], rel=1e-12, abs=0.0)
    head = theirs.lm_head.weight
    assert torch.allclose(ours[-1].logits.weight, head, rtol=1e-10, atol=1e-13)
    if tied:
        assert head is theirs.get_input_embeddings().weight


@needs_transformers
@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2"])
def test_in_float64_the_norms_keep_float64_where_transformers_rounds_to_float32(family):
    """Each block's two norms and the head's: float64 in float64 (a pipeline's and one
    process's summation orders then differ only in the last digits, not in float32
    roundings), and in float32 the same bits as transformers' own RMSNorm."""
    import copy

    shape = hf.parse(f"hf:{family}:tiny")
    block = hf.build_layer(shape, 1, 0, torch.float64)
    head = hf.build_layer(shape, shape.num_layers - 1, 0, torch.float64)
    norms = [block.block.input_layernorm, block.block.post_attention_layernorm, head.norm]
    generator = torch.Generator().manual_seed(4)
    x = 3 * torch.randn(3, shape.seq_len, shape.hidden, dtype=torch.float64, generator=generator)
    theirs_class = hf._llama_like(shape, "RMSNorm")
    for norm in norms:
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5, generator=generator)
        theirs = theirs_class(shape.hidden, eps=norm.variance_epsilon).double()
        theirs.load_state_dict(norm.state_dict())
        exact = norm.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
        with torch.no_grad():
            ours_error = float((norm(x) - exact).abs().max() / exact.abs().max())
            theirs_error = float((theirs(x) - exact).abs().max() / exact.abs().max())
            assert ours_error < 1e-14 and theirs_error > 1e-9, (ours_error, theirs_error)
            x32 = x.float()
            assert torch.equal(copy.deepcopy(norm).float()(x32), copy.deepcopy(theirs).float()(x32))


@needs_transformers
def test_a_tied_heads_copy_starts_as_the_embedding_and_their_gradients_add_up():
    """A stage holding only the head of a tied model builds it as a copy of the embedding;
    the shared tensor's gradient in the whole model is the sum of the two copies'
    gradients in the split one (what the backend's tie group sums every step)."""
    shape = hf.parse("hf:gpt2:tiny")
    head = hf.build_layer(shape, shape.num_layers - 1, 4, torch.float64)
    embedding = hf.build_layer(shape, 0, 4, torch.float64)
    assert torch.equal(head.logits.weight, embedding.tokens.weight)
    ids = ids_for(shape, 2)
    split = hf.build_layers(shape, 0, shape.num_layers, 4, torch.float64)
    from real.config import TinyGptSpec
    from real.models.family import named

    whole = named("hf:gpt2:tiny", TinyGptSpec()).build_whole(4, torch.float64)
    for model in (split, whole):
        model(ids).sum().backward()
    summed = split[0].tokens.weight.grad + split[-1].logits.weight.grad
    assert torch.allclose(whole[0].tokens.weight.grad, summed, rtol=1e-12, atol=1e-15)
    assert not torch.allclose(split[0].tokens.weight.grad, summed)


@needs_transformers
def test_a_local_config_json_sets_the_shape(tmp_path: Path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "vocab_size": 96,
                "max_position_embeddings": 12,
                "hidden_size": 24,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "intermediate_size": 40,
                "num_hidden_layers": 3,
            }
        )  # fmt: skip
    )
    shape = hf.parse(f"hf:llama:{tmp_path}")
    assert (shape.vocab, shape.seq_len, shape.hidden, shape.heads, shape.blocks) == (96, 12, 24, 4, 3)
    assert (shape.kv_heads, shape.intermediate, shape.num_layers) == (2, 40, 5)
    layers = hf.build_layers(shape, 0, shape.num_layers, 0, torch.float32).eval()
    with torch.no_grad():
        assert torch.equal(layers(ids_for(shape)), hf.as_transformers_model(shape, layers)(ids_for(shape)).logits)


def saved_model(family: str, directory: Path, seed: int = 3, shard: bool = False):
    """A transformers model of the family's tiny shape with transformers' own random
    weights, saved as `save_pretrained` writes it (safetensors; `shard`: in several files)."""
    shape = hf.parse(f"hf:{family}:tiny")
    torch.manual_seed(seed)
    config = hf.hf_config(shape)
    import transformers

    kind = "GPT2LMHeadModel" if family == "gpt2" else f"{hf.LLAMA_LIKE[family][1]}ForCausalLM"
    model = getattr(transformers, kind)(config)
    model.save_pretrained(directory, safe_serialization=True, max_shard_size="20KB" if shard else "5GB")
    return model


@needs_transformers
@pytest.mark.parametrize(
    ("family", "shard"), [("gpt2", False), ("llama", False), ("mistral", False), ("qwen2", True), ("gpt2", True)]
)
def test_weights_from_a_directory_compute_what_transformers_loads_from_it(family, shard, tmp_path: Path):
    saved_model(family, tmp_path, shard=shard)
    assert (tmp_path / "model.safetensors.index.json").is_file() == shard
    shape = hf.parse(f"hf:{family}:{tmp_path}")
    assert shape.weights == str(tmp_path) and shape.tied == (family == "gpt2")
    import transformers

    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, torch_dtype=torch.float32).eval()
    ids = ids_for(shape, 2)
    for seed in (0, 9):  # the weights are the files', whatever the seed
        layers = hf.build_layers(shape, 0, shape.num_layers, seed, torch.float32).eval()
        with torch.no_grad():
            assert torch.equal(layers(ids), theirs(ids).logits)
    # a stage reads only its own layers, with the whole model's weights
    whole = hf.build_layers(shape, 0, shape.num_layers, 0, torch.float64)
    stage = hf.build_layers(shape, 1, shape.num_layers, 0, torch.float64)
    for mine, alone in zip(list(whole)[1:], stage):
        for (name, a), (_, b) in zip(mine.named_parameters(), alone.named_parameters()):
            assert torch.equal(a, b), name
    # and they are not the seed's
    seeded = hf.build_layer(hf.parse(f"hf:{family}:tiny"), 0, 0, torch.float64).get_parameter("tokens.weight")
    assert not torch.allclose(whole[0].get_parameter("tokens.weight"), seeded)


@needs_transformers
def test_weights_that_cannot_be_read_are_one_line_errors(tmp_path: Path):
    saved_model("llama", tmp_path)
    from safetensors.torch import load_file, save_file

    tensors = load_file(tmp_path / "model.safetensors")
    save_file(
        {k: v for k, v in tensors.items() if k != "model.layers.1.mlp.up_proj.weight"}, tmp_path / "model.safetensors"
    )
    shape = hf.parse(f"hf:llama:{tmp_path}")
    hf.build_layers(shape, 0, 2, 0)  # the layers before it load
    with pytest.raises(ConfigError, match=r"the weights lack model\.layers\.1\.mlp\.up_proj\.weight"):
        hf.build_layer(shape, 2, 0)
    wrong = {**tensors, "model.norm.weight": torch.ones(7)}
    save_file(wrong, tmp_path / "model.safetensors")
    hf._weight_files.cache_clear()
    with pytest.raises(ConfigError, match=r"model\.norm\.weight has shape \(7,\), the model built from its config"):
        hf.build_layer(hf.parse(f"hf:llama:{tmp_path}"), shape.num_layers - 1, 0)
    (tmp_path / "model.safetensors").unlink()
    torch.save(tensors, tmp_path / "pytorch_model.bin")
    with pytest.raises(ConfigError) as caught:
        hf.parse(f"hf:llama:{tmp_path}")
    assert "weights only as pytorch_model.bin" in str(caught.value) and "\n" not in str(caught.value)
    (tmp_path / "pytorch_model.bin").unlink()
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "gone.safetensors"}}))
    with pytest.raises(ConfigError, match="lists gone.safetensors"):
        hf.parse(f"hf:llama:{tmp_path}")


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("hf:gpt2:gpt2-medium", "nothing is downloaded: save the model's files (config.json) to a directory"),
        ("hf:falcon:tiny", "FAMILY one of gpt2, llama, mistral, qwen2"),
        ("gpt2", "expected hf:FAMILY:PRESET or hf:FAMILY:DIR"),
    ],
)
def test_names_that_need_the_hub_or_no_family_are_one_line_errors(name, words):
    with pytest.raises(ConfigError) as caught:
        hf.parse(name)
    assert words in str(caught.value) and "\n" not in str(caught.value)


@needs_transformers
@pytest.mark.parametrize("family", FAMILIES)
def test_a_silent_config_json_ties_as_its_transformers_class_does(family, tmp_path: Path):
    import transformers

    cls = transformers.GPT2Config if family == "gpt2" else getattr(transformers, f"{hf.LLAMA_LIKE[family][1]}Config")
    assert hf.DEFAULT_TIED[family] == cls().tie_word_embeddings
    sizes = (
        {"vocab_size": 64, "n_positions": 8, "n_embd": 16, "n_head": 2, "n_layer": 1}
        if family == "gpt2"
        else {
            "vocab_size": 64,
            "max_position_embeddings": 8,
            "hidden_size": 16,
            "num_attention_heads": 2,
            "num_hidden_layers": 1,
        }
    )
    (tmp_path / "config.json").write_text(json.dumps(sizes))
    assert hf.parse(f"hf:{family}:{tmp_path}").tied == cls().tie_word_embeddings


@pytest.mark.parametrize(("family", "extra"), [("mistral", {}), ("qwen2", {"use_sliding_window": True})])
def test_a_sliding_window_shorter_than_the_sequence_is_refused(family, extra, tmp_path: Path):
    sizes = {"vocab_size": 64, "max_position_embeddings": 8, "hidden_size": 16, "num_attention_heads": 2}
    (tmp_path / "config.json").write_text(json.dumps({**sizes, "num_hidden_layers": 1, "sliding_window": 4, **extra}))
    with pytest.raises(ConfigError, match=r"sliding-window attention \(4 of 8 positions\) is not built here"):
        hf.parse(f"hf:{family}:{tmp_path}")
    (tmp_path / "config.json").write_text(json.dumps({**sizes, "num_hidden_layers": 1, "sliding_window": 8, **extra}))
    assert hf.parse(f"hf:{family}:{tmp_path}").seq_len == 8


def test_a_config_json_without_the_sizes_is_named(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 10}))
    with pytest.raises(ConfigError, match="config.json lacks n_positions, n_embd, n_head, n_layer"):
        hf.parse(f"hf:gpt2:{tmp_path}")


GPT2_SIZES = {"vocab_size": 128, "n_positions": 16, "n_embd": 32, "n_head": 4, "n_layer": 2}


@pytest.mark.parametrize(
    "text,words",
    [
        ("garbage{", "config.json:1: not JSON"),
        ("", "config.json:1: not JSON"),
        ('"a string"', "config.json must hold a JSON object, got str"),
        (json.dumps({**GPT2_SIZES, "n_embd": "32"}), "n_embd must be a whole number in [1, 10,000,000], got '32'"),
        (json.dumps({**GPT2_SIZES, "n_head": -4}), "n_head must be a whole number in [1, 10,000,000], got -4"),
        (json.dumps({**GPT2_SIZES, "n_head": 5}), "hidden size 32 is not a multiple of its 5 heads"),
        (json.dumps({**GPT2_SIZES, "n_layer": 0}), "n_layer must be a whole number in [1, 10,000,000], got 0"),
        (json.dumps({**GPT2_SIZES, "n_layer": 2.7}), "n_layer must be a whole number in [1, 10,000,000], got 2.7"),
        (json.dumps({**GPT2_SIZES, "vocab_size": 1}), "vocab_size must be a whole number in [2, 10,000,000]"),
        (json.dumps({**GPT2_SIZES, "n_embd": 8192, "n_head": 64, "n_layer": 48}), "past the 2,000,000,000"),
    ],
    ids=[
        "garbage",
        "empty",
        "string",
        "size-as-string",
        "negative",
        "not-dividing",
        "no-blocks",
        "fraction",
        "one-token",
        "40-GB",
    ],  # fmt: skip
)
def test_a_bad_config_json_is_named_before_anything_is_built(tmp_path: Path, text, words):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ConfigError) as caught:
        hf.parse(f"hf:gpt2:{tmp_path}")
    assert words in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_a_whole_number_written_as_a_float_is_taken(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({**GPT2_SIZES, "n_layer": 2.0}))
    assert hf.parse(f"hf:gpt2:{tmp_path}").blocks == 2
    # 12 x 2048^2 = 50.3 M parameters a block: 39 blocks are under the bound, 40 past it
    (tmp_path / "config.json").write_text(json.dumps({**GPT2_SIZES, "n_embd": 2048, "n_head": 16, "n_layer": 39}))
    assert hf.parameters(hf.parse(f"hf:gpt2:{tmp_path}")) < hf.MAX_PARAMETERS
    (tmp_path / "config.json").write_text(json.dumps({**GPT2_SIZES, "n_embd": 2048, "n_head": 16, "n_layer": 40}))
    with pytest.raises(ConfigError, match="about 2,013,"):
        hf.parse(f"hf:gpt2:{tmp_path}")


def test_without_transformers_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import now fails
    with pytest.raises(ConfigError, match=r"need transformers: pip install -e '\.\[hf\]'"):
        hf.build_layer(hf.parse("hf:gpt2:tiny"), 0, 0)


def test_without_safetensors_weights_say_how_to_install_it(monkeypatch, tmp_path: Path):
    (tmp_path / "config.json").write_text(
        json.dumps({"vocab_size": 64, "n_positions": 8, "n_embd": 16, "n_head": 2, "n_layer": 1})
    )
    (tmp_path / "model.safetensors").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "safetensors", None)  # import now fails
    with pytest.raises(ConfigError, match=r"weights need safetensors: pip install -e '\.\[hf\]'"):
        hf.parse(f"hf:gpt2:{tmp_path}")
