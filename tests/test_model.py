"""The small transformer the lab trains: its arguments, its inputs and what it shares between layers."""

from __future__ import annotations

import re

import pytest
import torch

import posenc
from posenc.model import TransformerEncoder, TransformerLM
from tests.registry import each_code_path


def test_a_width_not_divisible_by_the_heads_is_named():
    # used to surface as "rotary_dim must be even and at most d_head=7", naming neither value
    with pytest.raises(ValueError, match="d_model=30 must be divisible by n_heads=4"):
        TransformerLM(16, d_model=30, n_heads=4)


@pytest.mark.parametrize(("tokens", "value"), [([[1, 16]], 16), ([[-1, 3]], -1), ([[0, 99, 2]], 99)])
def test_token_ids_outside_the_vocabulary_are_named(tokens, value):
    model = TransformerLM(16, d_model=16, n_heads=2)
    with pytest.raises(ValueError, match=re.escape(f"token id {value} is outside the vocabulary 0 … 15")):
        model(torch.tensor(tokens))


def _first_block_input(model: TransformerLM, tokens: torch.Tensor) -> torch.Tensor:
    seen = []
    handle = model.blocks[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    model(tokens)
    handle.remove()
    return seen[0]  # [b, s, d]


@pytest.mark.parametrize("encoding", ["sinusoidal", "learned", "rope"])
def test_the_embedding_scale_multiplies_the_tokens_and_not_the_added_positions(encoding):
    # Vaswani et al. scale token embeddings by √d_model before adding the sinusoid; the positions keep
    # their own size, so the difference of two scales is the token embedding times their difference
    torch.manual_seed(0)
    plain = TransformerLM(32, d_model=16, n_heads=2, encoding=encoding).double()
    scaled = TransformerLM(32, d_model=16, n_heads=2, encoding=encoding, embedding_scale=4.0).double()
    scaled.load_state_dict(plain.state_dict())
    tokens = torch.randint(0, 32, (2, 9))
    tokens_alone = plain.token_embedding.weight[tokens]  # [b, s, d]
    difference = _first_block_input(scaled, tokens) - _first_block_input(plain, tokens)
    torch.testing.assert_close(difference, 3.0 * tokens_alone, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("scale", [0, -1.0, float("nan"), float("inf")])
def test_a_bad_embedding_scale_is_named(scale):
    with pytest.raises(ValueError, match=f"embedding_scale must be positive and finite, got {scale}"):
        TransformerLM(16, d_model=16, n_heads=2, embedding_scale=scale)
    with pytest.raises(TypeError, match="embedding_scale must be a real number"):
        TransformerLM(16, d_model=16, n_heads=2, embedding_scale="sqrt")


def test_float_token_ids_are_refused():
    with pytest.raises(TypeError, match="tokens must be integer ids, got dtype torch.float32"):
        TransformerLM(16, d_model=16, n_heads=2)(torch.zeros(1, 3))


@pytest.mark.parametrize("encoding", ["learned", "sinusoidal"])
def test_unshared_additive_encodings_leave_no_parameter_without_a_gradient(encoding):
    # an additive encoding acts once, on the embeddings: copies in the layers would never be trained
    torch.manual_seed(0)
    model = TransformerLM(32, d_model=16, n_layers=4, n_heads=2, encoding=encoding, share_encoding=False)
    shared = TransformerLM(32, d_model=16, n_layers=4, n_heads=2, encoding=encoding, share_encoding=True)
    model(torch.randint(0, 32, (2, 12))).sum().backward()
    untrained = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum()]
    assert untrained == []
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in shared.parameters())


def _bidirectional(name: str) -> bool:
    """Whether the encoding builds for a bidirectional model (CoPE counts over causal keys only)."""
    try:
        posenc.encodings.encoding_class(name).model_arguments(d_model=16, n_heads=2, max_len=16, causal=False)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    ("name", "model_class"),
    [(name, TransformerLM) for name in posenc.available()]
    + [(name, TransformerEncoder) for name in posenc.available() if _bidirectional(name)],
)
def test_unshared_encodings_leave_no_parameter_without_a_gradient(name, model_class):
    # the model's own encoding once kept T5's and Swin's original table, which no layer read
    torch.manual_seed(0)
    model = model_class(
        32, d_model=16, n_layers=3, n_heads=2, encoding=name, max_len=16, share_encoding=False
    )
    model(torch.randint(0, 32, (2, 12))).sum().backward()
    untrained = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum()]
    assert untrained == []


@pytest.mark.parametrize(
    ("argument", "value", "error"),
    [
        ("d_ff", 0, ValueError),
        ("d_ff", -1, ValueError),
        ("d_ff", 2.5, TypeError),
        ("share_encoding", "no", TypeError),
    ],
)
def test_bad_model_arguments_are_named(argument, value, error):
    with pytest.raises(error, match=argument):
        TransformerLM(16, d_model=16, n_heads=2, **{argument: value})


def test_unshared_attention_encodings_give_each_layer_its_own_trained_table():
    torch.manual_seed(0)
    model = TransformerLM(32, d_model=16, n_layers=3, n_heads=2, encoding="t5", share_encoding=False)
    model(torch.randint(0, 32, (2, 12))).sum().backward()
    tables = [block.attention.encoding.table for block in model.blocks]
    assert len({id(t) for t in tables}) == 3
    assert all(t.grad is not None and t.grad.abs().sum() > 0 for t in tables)


def test_the_encoder_refuses_causal_attention():
    with pytest.raises(ValueError, match="TransformerEncoder is bidirectional"):
        TransformerEncoder(16, causal=True)


def _compiled_equals_eager(name: str, backend: str, attention: str = "sdpa") -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = TransformerLM(64, d_model=32, n_layers=2, n_heads=4, encoding=name, max_len=64, backend=attention)
    tokens = torch.randint(0, 64, (2, 16))
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    logits = compiled(tokens)
    logits.square().mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    expected = model(tokens)
    expected.square().mean().backward()
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-4)
    assert grads.keys() == {n for n, p in model.named_parameters() if p.grad is not None}
    for n, p in model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(grads[n], p.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", each_code_path())
def test_compiles_with_fullgraph_for_every_registered_encoding_forward_and_backward(name):
    # sinusoidal, learned, and ALiBi/T5 on sdpa used to break the graph (host reads of positions).
    # aot_eager traces the whole forward and backward as inductor does, without generating code (half
    # a minute to more than a minute an encoding on a cold cache); inductor itself: the test below.
    _compiled_equals_eager(name, "aot_eager")


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_sandwich_on_flex_compiles_with_fullgraph(backend):
    # its score_mod sized a per-distance table from the positions, a data-dependent guard
    _compiled_equals_eager("sandwich", backend, attention="flex")


@pytest.mark.slow
@pytest.mark.parametrize("name", posenc.available())
def test_every_registered_encoding_on_flex_compiles_with_fullgraph(name):
    _compiled_equals_eager(name, "aot_eager", attention="flex")


@pytest.mark.slow
@pytest.mark.parametrize("name", posenc.available())
def test_inductor_compiles_every_registered_encoding_forward_and_backward(name):
    _compiled_equals_eager(name, "inductor")


def test_inductor_compiles_a_model_forward_and_backward():
    _compiled_equals_eager("rope", "inductor")


@pytest.mark.parametrize(
    ("name", "positions", "message"),
    [
        ("learned", [-5, -4, -3], "positions of a learned table of max_len=16 must lie in 0 … 15"),
        ("learned", [14, 15, 16], "positions of a learned table of max_len=16 must lie in 0 … 15"),
        ("rope", [2**27, 2**27 + 1, 2**27 + 2], "positions must satisfy |position| < 2^27"),
        ("alibi", [2**63 - 2, 2**63 - 1, -(2**63)], "must lie within ±2^62"),
    ],
)
def test_a_compiled_model_stops_on_positions_the_encoding_cannot_take(name, positions, message):
    # compiled, the checks used to be skipped: negative positions of a learned table wrapped round
    torch._dynamo.reset()
    model = TransformerLM(32, d_model=16, n_layers=1, n_heads=2, encoding=name, max_len=16)
    compiled = torch.compile(model, fullgraph=True)
    tokens = torch.zeros(1, 3, dtype=torch.long)
    compiled(tokens, positions=torch.tensor([0, 1, 2]))
    with pytest.raises(RuntimeError, match=re.escape(message)):
        compiled(tokens, positions=torch.tensor(positions))


def test_a_compiled_model_stops_on_token_ids_outside_the_vocabulary():
    torch._dynamo.reset()
    compiled = torch.compile(TransformerLM(16, d_model=16, n_layers=1, n_heads=2), fullgraph=True)
    compiled(torch.tensor([[1, 2]]))
    with pytest.raises(RuntimeError, match=re.escape("token ids must lie in 0 … 15")):
        compiled(torch.tensor([[1, 16]]))


@pytest.mark.parametrize("name", posenc.available())
def test_positions_and_the_cache_offset_are_resolved_once_per_forward(name, monkeypatch):
    # they used to be resolved in the model, in every attention layer and again in RoPE
    import posenc.attention
    import posenc.model

    calls, seen = [], []
    resolve = posenc.model.continued_positions
    monkeypatch.setattr(posenc.model, "continued_positions", lambda *a: calls.append(1) or resolve(*a))
    monkeypatch.setattr(posenc.attention, "continued_positions", lambda *a: pytest.fail("resolved again"))
    forward_at = posenc.attention.MultiHeadAttention.forward_at
    monkeypatch.setattr(
        posenc.attention.MultiHeadAttention,
        "forward_at",
        lambda self, x, positions, cache=None, documents=None: (
            seen.append(positions) or forward_at(self, x, positions, cache, documents)
        ),
    )
    model = TransformerLM(32, d_model=16, n_layers=3, n_heads=2, encoding=name, max_len=16)
    caches = model.new_caches()
    model(torch.randint(0, 32, (2, 5)), caches=caches)
    model(torch.randint(0, 32, (2, 1)), caches=caches)
    assert len(calls) == 2
    assert [int(p[0].max()) for p in seen] == [0, 0, 0, 5, 5, 5]  # the cache offset, read once per call
    assert seen[0] is seen[1] is seen[2] and seen[3] is seen[4] is seen[5]


def test_randomized_positions_in_training_and_in_evaluation_and_positions_given_kept(monkeypatch):
    """Ruoss et al. draw the positions at every call, evaluation included (their range evaluation applies
    the model with a random key); positions given, and a KV cache's, are kept."""
    import posenc.attention

    seen = []
    forward_at = posenc.attention.MultiHeadAttention.forward_at
    monkeypatch.setattr(
        posenc.attention.MultiHeadAttention,
        "forward_at",
        lambda self, x, positions, cache=None, documents=None: (
            seen.append(positions) or forward_at(self, x, positions, cache, documents)
        ),
    )
    torch.manual_seed(0)
    model = TransformerLM(32, d_model=16, n_layers=1, n_heads=2, encoding="rope", random_positions=1000)
    tokens = torch.randint(0, 32, (4, 10))
    model.train()
    model(tokens)
    trained = seen[-1]
    assert trained.shape == (4, 10) and (trained.diff(dim=-1) > 0).all() and int(trained.max()) < 1000
    assert int(trained.max()) > 9  # drawn from the whole range, not 0 … 9
    model.eval()
    model(tokens)
    evaluated = seen[-1]
    assert evaluated.shape == (4, 10) and (evaluated.diff(dim=-1) > 0).all() and int(evaluated.max()) > 9
    model(tokens, torch.arange(10))
    assert torch.equal(seen[-1], torch.arange(10))
    model(tokens[:, :6], caches=(caches := model.new_caches()))
    model(tokens[:, 6:], caches=caches)
    assert torch.equal(seen[-1], torch.arange(6, 10))


@pytest.mark.parametrize(
    ("encoding", "kwargs", "message"),
    [
        (
            "learned",
            {"max_len": 64, "random_positions": 100},
            "random_positions=100 reaches past the encoding's 64 positions",
        ),
        ("rope_axial", {"random_positions": 100}, "random_positions draws positions on one axis"),
        ("rope", {"random_positions": 0}, "random_positions must be positive, got 0"),
    ],
)
def test_randomized_positions_an_encoding_cannot_take_are_refused(encoding, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        TransformerLM(32, d_model=16, n_layers=1, n_heads=2, encoding=encoding, **kwargs)


@pytest.mark.parametrize(
    ("name", "backend"), [("rope", "aot_eager"), ("alibi", "aot_eager"), ("rope", "inductor")]
)
def test_a_compiled_model_takes_positions_and_documents_after_a_dynamic_recompile(name, backend):
    # a second length recompiles with symbolic sizes, and the shapes of positions [s] were compared as
    # tuples: valid positions were refused ("must have shape [7] … got (7,)")
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = TransformerLM(50, d_model=32, n_layers=2, n_heads=4, encoding=name, max_len=64)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    compiled(torch.randint(0, 50, (2, 12)))
    for length, positions in ((7, torch.arange(7) + 3), (9, torch.arange(9).expand(2, 9) + 1)):
        tokens = torch.randint(0, 50, (2, length))
        documents = (torch.arange(length) >= 4).long()
        expected = model(tokens, positions=positions, documents=documents)
        got = compiled(tokens, positions=positions, documents=documents)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("max_len", [0, -3])
def test_a_max_len_that_is_not_positive_is_refused_by_its_name(max_len):
    # FIRE used to be the one to complain, naming its threshold
    with pytest.raises(ValueError, match=f"max_len must be positive, got {max_len}"):
        TransformerLM(16, d_model=16, n_layers=1, n_heads=2, encoding="fire", max_len=max_len)


@pytest.mark.parametrize("name", ["rope", "alibi", "sinusoidal"])
def test_positions_on_the_meta_device_are_refused_by_name(name):
    # torch's internal "Cannot copy out of meta tensor" used to come out of the model
    model = TransformerLM(16, d_model=16, n_layers=1, n_heads=2, encoding=name, max_len=16)
    with pytest.raises(ValueError, match="positions are on the meta device"):
        model(torch.zeros(1, 4, dtype=torch.long), positions=torch.arange(4, device="meta"))


def test_lab_losses_of_a_float64_model_stay_float64_and_half_types_are_upcast():
    from posenc._validation import at_least_float32

    assert at_least_float32(torch.zeros(2, dtype=torch.float64)).dtype == torch.float64
    assert at_least_float32(torch.zeros(2, dtype=torch.bfloat16)).dtype == torch.float32
