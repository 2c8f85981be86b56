"""A transformers model with posenc's RoPE compiles as the unpatched one does: forward and greedy
generation with a static cache, eager and SDPA attention, aot_eager (full graph) and inductor."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is not installed (extra: peers)")

from posenc.integrations.transformers import use_posenc_rope  # noqa: E402


def tiny_llama(attention: str) -> transformers.LlamaForCausalLM:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        initializer_range=0.1,
        attn_implementation=attention,
    )
    return transformers.LlamaForCausalLM(config).eval()


def input_ids() -> torch.Tensor:
    return torch.randint(0, 100, (1, 9), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize(
    ("backend", "fullgraph", "attention"),
    [("aot_eager", True, "eager"), ("aot_eager", True, "sdpa"), ("inductor", False, "sdpa")],
)
def test_patched_model_compiles_to_the_same_logits(backend, fullgraph, attention):
    torch._dynamo.reset()
    model = use_posenc_rope(tiny_llama(attention))
    with torch.no_grad():
        expected = model(input_ids()).logits
        compiled = torch.compile(model, backend=backend, fullgraph=fullgraph)
        got = compiled(input_ids()).logits
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_patched_model_generates_with_a_compiled_static_cache_as_the_unpatched_one(backend):
    torch._dynamo.reset()
    plain, patched = tiny_llama("sdpa"), use_posenc_rope(tiny_llama("sdpa"))
    settings = dict(max_new_tokens=5, do_sample=False, cache_implementation="static", pad_token_id=0)
    with torch.no_grad():
        expected = plain.generate(input_ids(), **settings)
        patched.forward = torch.compile(patched.forward, backend=backend, fullgraph=backend == "aot_eager")
        got = patched.generate(input_ids(), **settings)
    assert torch.equal(got, expected)
