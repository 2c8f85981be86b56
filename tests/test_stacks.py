"""Per-layer stacks: patterns and lists of layer specs build the layers they declare (Gemma 3's local/global
bases with its QK-norm and query scalar, NoPE every fourth layer with Llama 4's QK-norm on the RoPE layers,
Command A's sliding-window RoPE around global NoPE), share or copy their encodings (each layer its own
QK-norm gains), agree on every backend, decode with KV caches and pack documents as the full forward; bad
patterns and layers are refused naming the value."""

from __future__ import annotations

import pytest
import torch

from posenc import build
from posenc.attention import BACKENDS
from posenc.model import TransformerLM
from posenc.qk_norm import QKNorm
from posenc.stacks import LayerSpec, layer, layer_specs, pattern
from posenc.temperature import Llama4Temperature

GEMMA_NORM = {"qk_norm": QKNorm(weight="unit_offset"), "query_pre_attn_scalar": 12}

GEMMA = pattern(
    "LLLLLG",
    L=layer("rope", base=1e4, window=4, **GEMMA_NORM),
    G=layer("rope", base=1e6, scaling="linear", scaling_args={"factor": 8.0}, **GEMMA_NORM),
)
NOPE_EVERY_4 = pattern(
    "RRRN",
    R=layer("rope", chunk=8, qk_norm=QKNorm(weight=None, eps=1e-5, after_rotation=True)),
    N=layer("nope", temperature=Llama4Temperature(floor_scale=8)),
)
COMMAND_A = pattern("SSSG", S=layer("rope", window=4), G=layer("nope"))
#: Shorter stacks of the same layers, for the tests that run every backend.
SHORT = {
    "gemma": pattern("LG", L=GEMMA.specs["L"], G=GEMMA.specs["G"]),
    "nope-every-4": pattern("RN", R=NOPE_EVERY_4.specs["R"], N=NOPE_EVERY_4.specs["N"]),
    "command-a": pattern("SG", S=COMMAND_A.specs["S"], G=COMMAND_A.specs["G"]),
}


def _model(layers, n_layers, backend="sdpa", **kwargs):
    torch.manual_seed(0)
    return TransformerLM(
        40, d_model=32, n_heads=4, n_layers=n_layers, layers=layers, backend=backend, **kwargs
    ).double()


def test_gemma_pattern_builds_local_and_global_layers_with_their_bases():
    model = _model(GEMMA, 6)
    windows = [block.attention.window for block in model.blocks]
    assert windows == [4, 4, 4, 4, 4, None]
    bases = [encoding.rotary_spectrum().base for encoding in model.layer_encodings]
    assert bases == [1e4] * 5 + [1e6]
    assert model.layer_encodings[0] is model.layer_encodings[4]  # one letter, one shared instance


def test_nope_every_fourth_layer_and_command_a_put_each_layer_where_the_pattern_says():
    model = _model(NOPE_EVERY_4, 8)
    kinds = "".join("N" if encoding.kind == "none" else "R" for encoding in model.layer_encodings)
    assert kinds == "RRRNRRRN"
    assert [block.attention.chunk for block in model.blocks][:4] == [8, 8, 8, None]
    assert model.blocks[3].attention.temperature == Llama4Temperature(floor_scale=8)
    model = _model(COMMAND_A, 4)
    assert [
        (e.kind, b.attention.window) for e, b in zip(model.layer_encodings, model.blocks, strict=True)
    ] == [("rotary", 4), ("rotary", 4), ("rotary", 4), ("none", None)]


def test_one_encoding_per_layer_as_a_list():
    model = _model(None, 3, encoding=["rope", "nope", "alibi"])
    assert [e.kind for e in model.layer_encodings] == ["rotary", "none", "bias"]
    assert model.encoding is model.layer_encodings[0]


def test_unshared_layers_get_copies_and_a_single_encoding_builds_as_before():
    shared, unshared = _model(GEMMA, 6), _model(GEMMA, 6, share_encoding=False)
    assert len({id(e) for e in shared.layer_encodings}) == 2
    assert len({id(e) for e in unshared.layer_encodings}) == 6
    torch.manual_seed(0)
    plain = TransformerLM(40, d_model=32, n_heads=4, n_layers=2, encoding="rope")
    assert not any("sinks" in key for key in plain.state_dict())
    assert all(block.attention.window is None and block.attention.chunk is None for block in plain.blocks)


@pytest.mark.parametrize("name", SHORT)
def test_a_stack_agrees_on_every_backend_and_decodes_with_caches_to_its_full_forward(name):
    layers = SHORT[name]
    n_layers = len(layers.letters)
    tokens = torch.randint(0, 40, (2, 11), generator=torch.Generator().manual_seed(1))
    outputs = {backend: _model(layers, n_layers, backend)(tokens) for backend in BACKENDS}
    for backend in BACKENDS:
        torch.testing.assert_close(outputs[backend], outputs["eager"], atol=1e-12, rtol=1e-12)
    model = _model(layers, n_layers)
    caches = model.new_caches()
    steps = torch.cat(
        [model(tokens[:, :4], caches=caches)]
        + [model(tokens[:, t : t + 1], caches=caches) for t in range(4, 11)],
        1,
    )
    torch.testing.assert_close(steps, outputs["eager"], atol=1e-12, rtol=1e-12)


def test_a_stack_gives_packed_documents_what_they_get_alone():
    model = _model(pattern("SG", S=layer("rope", window=3, sinks=True), G=layer("alibi", chunk=4)), 2)
    tokens = torch.randint(0, 40, (1, 13), generator=torch.Generator().manual_seed(2))
    positions = torch.cat([torch.arange(6), torch.arange(7)])
    packed = model(tokens, positions=positions, documents=torch.tensor([0] * 6 + [1] * 7))
    torch.testing.assert_close(packed[:, :6], model(tokens[:, :6]))
    torch.testing.assert_close(packed[:, 6:], model(tokens[:, 6:]))


def test_bad_patterns_and_layers_are_refused_naming_the_value():
    with pytest.raises(ValueError, match=r"pattern 'RRRN' \(4 layers\) does not cover n_layers=6"):
        _model(pattern("RRRN", R=layer("rope"), N=layer("nope")), 6)
    with pytest.raises(ValueError, match=r"pattern 'RRRN' \(4 layers\) does not cover n_layers=2"):
        _model(pattern("RRRN", R=layer("rope"), N=layer("nope")), 2)
    with pytest.raises(ValueError, match=r"pattern 'RX' uses \['X'\] with no layer given"):
        pattern("RX", R=layer("rope"))
    with pytest.raises(ValueError, match=r"never uses the layers given for \['N'\]"):
        pattern("RR", R=layer("rope"), N=layer("nope"))
    with pytest.raises(ValueError, match="layers gives 3 layers for n_layers=2"):
        layer_specs([layer(), layer(), layer()], 2)
    with pytest.raises(TypeError, match="pattern's letters need their layers"):
        layer_specs("RRRN", 4)
    with pytest.raises(ValueError, match="window must be a positive number of tokens, got 0"):
        layer("rope", window=0)
    with pytest.raises(ValueError, match="layer 1.s encoding SinusoidalEncoding is added to the embeddings"):
        _model([layer("rope"), layer("sinusoidal")], 2)
    with pytest.raises(ValueError, match=r"one logit per head \(4 heads\), got shape \(2,\)"):
        _model(layer("rope", sinks=[0.0, 1.0]), 2)
    with pytest.raises(ValueError, match="in encoding=\\[...\\] or in layers=, not both"):
        _model(layer(window=2), 2, encoding=["rope", "nope"])
    with pytest.raises(
        ValueError, match="encoding arguments \\['base'\\] apply to an encoding given by name"
    ):
        LayerSpec(build("nope"), {"base": 10.0})


def test_logit_options_reach_their_layers_each_with_gains_of_its_own():
    model = _model(GEMMA, 6)
    attentions = [block.attention for block in model.blocks]
    assert all(a.qk_norm == GEMMA_NORM["qk_norm"] and a.query_pre_attn_scalar == 12.0 for a in attentions)
    assert len({id(a.q_norm.weight) for a in attentions}) == 6  # gains are each layer's, like its projections
    assert [hasattr(block.attention, "q_norm") for block in _model(NOPE_EVERY_4, 4).blocks] == [True] * 3 + [
        False
    ]
    assert repr(layer("rope", softcap=50.0)) == "layer('rope', softcap=50.0)"
    with pytest.raises(ValueError, match="softcap=50.0 caps the logits, which backend='sdpa' never holds"):
        _model(layer("rope", softcap=50.0), 2)
    capped = {backend: _model(layer("rope", softcap=0.5), 2, backend) for backend in ("eager", "flex")}
    tokens = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(capped["flex"](tokens), capped["eager"](tokens), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("name", ["forgetting", "path"])
def test_gates_read_from_the_content_are_each_layers_own_unless_told_to_share(name):
    # the model shared one encoding across layers by default, so FoX's and PaTH's gates were one set
    # for the whole stack, unlike their papers; their descriptions now say each layer learns its own
    model = TransformerLM(16, d_model=16, n_layers=3, n_heads=2, encoding=name, max_len=16)
    encodings = model.layer_encodings
    assert len({id(e) for e in encodings}) == 3 and encodings[0] is model.encoding
    shared = TransformerLM(
        16, d_model=16, n_layers=3, n_heads=2, encoding=name, max_len=16, share_encoding=True
    )
    assert len({id(e) for e in shared.layer_encodings}) == 1
    stacked = TransformerLM(16, d_model=16, n_layers=2, n_heads=2, layers=layer(name))
    assert len({id(e) for e in stacked.layer_encodings}) == 2
    t5 = TransformerLM(16, d_model=16, n_layers=3, n_heads=2, encoding="t5", max_len=16)
    assert len({id(e) for e in t5.layer_encodings}) == 1  # T5 shares its table, as before
