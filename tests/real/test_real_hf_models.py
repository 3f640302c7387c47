"""Hugging Face decoder models cut into the planner's layers (real/models/hf.py).

The oracle is transformers' own causal-LM model (`GPT2LMHeadModel`, `LlamaForCausalLM`)
holding the same weights: the planner's layers, whole or cut into stages anywhere, compute
exactly its logits (float64), and a layer built alone has exactly the weights it has in the
whole model, so a stage can build only its own.
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

FAMILIES = ("gpt2", "llama")


def ids_for(shape: hf.HfShape, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, shape.vocab, (3, shape.seq_len), generator=torch.Generator().manual_seed(seed))


@needs_transformers
@pytest.mark.parametrize("family", FAMILIES)
def test_the_planner_layers_compute_the_transformers_model_exactly(family):
    shape = hf.parse(f"hf:{family}:tiny")
    layers = hf.build_layers(shape, 0, shape.num_layers, seed=5, dtype=torch.float64).eval()
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
    ours = spec.build_whole(seed=3, dtype=torch.float64)
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
    layers = hf.build_layers(shape, 0, shape.num_layers, 0, torch.float64).eval()
    with torch.no_grad():
        assert torch.equal(layers(ids_for(shape)), hf.as_transformers_model(shape, layers)(ids_for(shape)).logits)


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("hf:gpt2:gpt2-medium", "nothing is downloaded: save the model's files (config.json) to a directory"),
        ("hf:mistral:tiny", "FAMILY one of gpt2, llama"),
        ("gpt2", "expected hf:FAMILY:PRESET or hf:FAMILY:DIR"),
    ],
)
def test_names_that_need_the_hub_or_no_family_are_one_line_errors(name, words):
    with pytest.raises(ConfigError) as caught:
        hf.parse(name)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_config_json_without_the_sizes_is_named(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 10}))
    with pytest.raises(ConfigError, match="config.json lacks n_positions, n_embd, n_head, n_layer"):
        hf.parse(f"hf:gpt2:{tmp_path}")


def test_without_transformers_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import now fails
    with pytest.raises(ConfigError, match=r"need transformers: pip install -e '\.\[hf\]'"):
        hf.build_layer(hf.parse("hf:gpt2:tiny"), 0, 0)
