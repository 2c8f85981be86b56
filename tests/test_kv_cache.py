"""The KV cache: written in place, grown by doubling, and StreamingLLM's sinks and window."""

from __future__ import annotations

import re

import pytest
import torch

import posenc
from posenc.attention import KVCache
from posenc.encodings import encoding_class
from posenc.encodings.capabilities import Capabilities
from posenc.functional.coordinates import mrope_decode_positions, mrope_positions
from posenc.model import TransformerLM

STREAMING = ["rope", "alibi", "t5", "nope"]
#: Encodings of positions on several axes: a sink cache puts its places on the diagonal.
STREAMING_AXES = ["mrope", "rope_axial", "swin_v2"]


def _kv(s, b=2, h=2, d=4, start=0):
    keys = torch.arange(start, start + s).float().view(1, 1, s, 1).expand(b, h, s, d).clone()
    return keys, keys + 0.5, torch.arange(start, start + s)


def test_appending_writes_into_memory_allocated_ahead_and_grows_by_doubling():
    cache = KVCache()
    cache.append(*_kv(3))
    storage = cache._keys.data_ptr()
    for t in range(3, 60):
        cache.append(*_kv(1, start=t))
    assert cache._keys.data_ptr() == storage  # 60 tokens fit the first allocation: no copy per step
    cache.append(*_kv(10, start=60))
    assert cache.length == 70 and cache._keys.shape[2] == 128  # doubled once
    assert torch.equal(cache.keys[0, 0, :, 0], torch.arange(70).float())
    assert torch.equal(cache.positions, torch.arange(70))


def test_a_fixed_capacity_refuses_what_does_not_fit_naming_the_numbers():
    cache = KVCache(capacity=4)
    cache.append(*_kv(3))
    with pytest.raises(
        ValueError,
        match=re.escape("the cache holds 4 tokens (its capacity) and 3 are cached; 2 more do not fit"),
    ):
        cache.append(*_kv(2, start=3))


def test_a_cache_serves_one_batch():
    cache = KVCache()
    cache.append(*_kv(3, b=2))
    with pytest.raises(ValueError, match=re.escape("the cache holds keys of batch 2, 2 heads and width 4")):
        cache.append(*_kv(1, b=3, start=3))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"sinks": -1, "window": 4}, "sinks must be ≥ 0, got -1"),
        ({"sinks": 2}, "sinks=2 needs a window"),
        ({"sinks": 2, "window": 0}, "window must be positive, got 0"),
        ({"capacity": 5, "sinks": 2, "window": 4}, "capacity=5 must be sinks + window = 6"),
        ({"capacity": 0}, "capacity must be positive, got 0"),
    ],
)
def test_bad_cache_settings_are_refused_naming_the_value(arguments, message):
    capacity = arguments.pop("capacity", None)
    with pytest.raises(ValueError, match=re.escape(message)):
        KVCache(capacity, **arguments)


def test_a_sink_cache_keeps_the_first_tokens_and_the_last_ones_at_their_places_in_the_cache():
    cache = KVCache(sinks=2, window=3)
    for t in range(9):
        cache.append(*_kv(1, start=t))
    assert torch.equal(cache.keys[0, 0, :, 0], torch.tensor([0.0, 1, 6, 7, 8]))  # sinks 0, 1; window 6 … 8
    assert torch.equal(cache.positions, torch.arange(5))
    with pytest.raises(ValueError, match="a call adds 4 tokens, more than the window of 3"):
        cache.append(*_kv(4, start=9))


@pytest.mark.parametrize("name", STREAMING + STREAMING_AXES)
def test_streaming_decoding_equals_a_full_recompute_over_the_kept_tokens(name):
    # StreamingLLM: the kept tokens (sinks, then the window) at positions 0 … n − 1 of the cache. One layer:
    # a deeper layer's cached keys were computed when evicted tokens were still seen, which a recompute
    # over the kept tokens cannot reproduce (nor does StreamingLLM claim it)
    torch.manual_seed(0)
    model = TransformerLM(64, d_model=32, n_layers=1, n_heads=4, encoding=name, max_len=64).eval()
    sinks, window = 2, 5
    tokens = torch.randint(0, 64, (2, 20))
    caches = model.new_caches(sinks=sinks, window=window)
    with torch.no_grad():
        model(tokens[:, :4], caches=caches)
        for t in range(4, 20):
            step = model(tokens[:, t : t + 1], caches=caches)[:, -1]
            kept = list(range(min(sinks, t + 1))) + list(range(max(sinks, t + 1 - window), t + 1))
            full = model(tokens[:, kept])[:, -1]  # positions 0 … len(kept) − 1
            torch.testing.assert_close(step, full, rtol=1e-5, atol=1e-5)


def test_a_sink_cache_on_several_axes_places_its_tokens_on_the_diagonal():
    cache = KVCache(sinks=1, window=3)
    for t in range(6):
        cache.append(*_kv(1, start=t)[:2], torch.full((1, 3), t), columns=3)
    assert cache.positions.shape == (4, 3) and torch.equal(
        cache.positions, torch.arange(4)[:, None].expand(4, 3)
    )
    assert cache.next_position(3) == 3


def test_streaming_memory_stays_constant_over_many_steps():
    torch.manual_seed(0)
    model = TransformerLM(16, d_model=16, n_layers=1, n_heads=2, encoding="rope").eval()
    caches = model.new_caches(sinks=4, window=32)
    with torch.no_grad():
        model(torch.zeros(1, 4, dtype=torch.long), caches=caches)
        storage = caches[0]._keys.data_ptr()
        for _ in range(2000):
            model(torch.zeros(1, 1, dtype=torch.long), caches=caches)
    assert caches[0].length == 36 and caches[0]._keys.shape[2] == 36 and caches[0]._keys.data_ptr() == storage


@pytest.mark.slow
def test_streaming_memory_stays_constant_over_100_000_decode_steps():
    torch.manual_seed(0)
    model = TransformerLM(16, d_model=8, n_layers=1, n_heads=1, encoding="rope").eval()
    caches = model.new_caches(sinks=4, window=60)
    with torch.no_grad():
        model(torch.zeros(1, 4, dtype=torch.long), caches=caches)
        storage = (caches[0]._keys.data_ptr(), caches[0]._values.data_ptr())
        for _ in range(100_000):
            logits = model(torch.zeros(1, 1, dtype=torch.long), caches=caches)
    assert (caches[0]._keys.data_ptr(), caches[0]._values.data_ptr()) == storage
    assert caches[0].length == 64 and torch.isfinite(logits).all()


def test_positions_cannot_be_given_with_a_sink_cache():
    model = TransformerLM(16, d_model=16, n_layers=1, n_heads=2).eval()
    caches = model.new_caches(sinks=1, window=4)
    with pytest.raises(ValueError, match="give no positions with it"):
        model(torch.zeros(1, 2, dtype=torch.long), positions=torch.arange(2), caches=caches)


@pytest.mark.parametrize("name", ["rope", "alibi", "t5", "nope", "sinusoidal", "learned"])
def test_a_preallocated_cache_decodes_as_the_full_forward(name):
    torch.manual_seed(0)
    model = TransformerLM(64, d_model=32, n_layers=2, n_heads=4, encoding=name, max_len=64).eval()
    tokens = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        full = model(tokens)
        caches = model.new_caches(capacity=12)
        steps = [model(tokens[:, :5], caches=caches)] + [
            model(tokens[:, t : t + 1], caches=caches) for t in range(5, 12)
        ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


def test_decoding_a_batch_on_several_axes_continues_each_row_past_its_own_largest_coordinate():
    # Qwen2-VL's rope_deltas are per row: row 0 is text up to 7, row 1 ends with an image whose largest
    # coordinate is 4, so the next text token sits at 8 in row 0 and at 5 in row 1
    torch.manual_seed(0)
    rope = posenc.build("rope", d_head=8, sections=(2, 1, 1))
    model = TransformerLM(32, d_model=16, n_heads=2, n_layers=1, encoding=rope).eval()
    types = torch.tensor([[0] * 8, [0, 0, 1, 1, 1, 1, 1, 1]])
    prompt, deltas = mrope_positions(types, image_grids=[[1, 2, 3]])  # [2, 8, 3], [2, 1]
    tokens, following = torch.randint(0, 32, (2, 8)), torch.randint(0, 32, (2, 1))
    with torch.no_grad():
        caches = model.new_caches()
        model(tokens, positions=prompt, caches=caches)
        assert torch.as_tensor(caches[0].next_position(3)).tolist() == [8, 5]
        step = model(following, caches=caches)
        explicit = model.new_caches()
        model(tokens, positions=prompt, caches=explicit)
        expected = model(following, positions=mrope_decode_positions(deltas, 8), caches=explicit)
    torch.testing.assert_close(step, expected, rtol=0, atol=0)


def test_fractional_coordinates_after_integer_ones_are_cached_exactly():
    cache = KVCache()
    first = torch.tensor([[0, 0], [0, 1], [1, 0]])  # int64
    second = torch.tensor([[1.5, 1.5], [2.25, 0.5], [3.0, 2.75]])  # float
    cache.append(*_kv(3)[:2], first, columns=2)
    cache.append(*_kv(3, start=3)[:2], second, columns=2)
    assert cache.positions.dtype == torch.float64
    assert torch.equal(cache.positions, torch.cat((first.double(), second.double())))


def test_swin_v2_decoding_at_fractional_coordinates_after_integer_ones_equals_the_full_forward():
    # Swin v2's bias reads the cached keys' coordinates: truncated ones would give another bias
    torch.manual_seed(0)
    model = TransformerLM(32, d_model=32, n_heads=2, n_layers=1, encoding="swin_v2", max_len=64).eval()
    tokens = torch.randint(0, 32, (1, 6))
    first = torch.tensor([[0, 0], [0, 1], [1, 0]])
    second = torch.tensor([[1.5, 1.5], [2.25, 0.5], [3.0, 2.75]])
    with torch.no_grad():
        full = model(tokens, positions=torch.cat((first.double(), second)))
        caches = model.new_caches()
        steps = [model(tokens[:, :3], positions=first, caches=caches)]
        steps.append(model(tokens[:, 3:], positions=second, caches=caches))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


#: Declared on the class (a property where settings decide, which the additive encodings do not use).
ADDITIVE = [
    name
    for name in posenc.available()
    if isinstance(declared := encoding_class(name).capabilities, Capabilities)
    and not declared.follows_moving_positions
]


def test_the_encodings_that_add_codes_to_the_embeddings_declare_it():
    assert {"sinusoidal", "learned", "sinusoidal_2d"} <= set(ADDITIVE)
    assert "rope" not in ADDITIVE and "alibi" not in ADDITIVE


@pytest.mark.parametrize("name", ADDITIVE)
def test_a_sink_cache_is_refused_for_codes_added_to_the_embeddings(name):
    # a cached key keeps the code of the place it entered at, so as the window moves every kept token sat
    # at the same place: decoding differed from a recompute by up to 1.25, silently
    model = TransformerLM(64, d_model=32, n_layers=1, n_heads=4, encoding=name, max_len=64)
    message = "adds its position codes to the token embeddings"
    with pytest.raises(ValueError, match=message):
        model.new_caches(sinks=2, window=5)
    with pytest.raises(ValueError, match=message):
        model(torch.randint(0, 64, (2, 4)), caches=[KVCache(sinks=2, window=5)])
    model(torch.randint(0, 64, (2, 4)), caches=model.new_caches())  # a cache that keeps every token: fine


def _tiny_lm(causal: bool = True):
    from posenc.model import TransformerEncoder, TransformerLM

    torch.manual_seed(0)
    cls = TransformerLM if causal else TransformerEncoder
    return cls(32, d_model=16, n_layers=2, n_heads=2, encoding="rope", max_len=32)


def test_one_cache_shared_by_every_layer_is_refused():
    # [KVCache()] * n_layers gave logits 4.97 from the full forward: layer 1 read layer 0's keys
    model = _tiny_lm()
    with pytest.raises(ValueError, match=r"the same cache appears more than once"):
        model(torch.zeros(1, 4, dtype=torch.long), caches=[KVCache()] * 2)


def test_a_cache_that_holds_one_layers_keys_is_refused_by_another_layer():
    from posenc.attention import MultiHeadAttention

    first, second = MultiHeadAttention(16, 2), MultiHeadAttention(16, 2)
    cache = KVCache()
    first(torch.randn(1, 3, 16), cache=cache)
    with pytest.raises(ValueError, match="already holds the keys of another attention layer"):
        second(torch.randn(1, 3, 16), cache=cache)
    first(torch.randn(1, 1, 16), cache=cache)  # its own layer goes on


def test_fewer_caches_than_layers_are_refused_naming_the_count():
    model = _tiny_lm()
    with pytest.raises(ValueError, match=r"one KVCache per layer \(2\), got 1 caches"):
        model(torch.zeros(1, 4, dtype=torch.long), caches=model.new_caches()[:1])


def test_bidirectional_attention_refuses_a_kv_cache():
    # an encoder decoded 4 + 4 tokens 5.78 away from its full forward; one bidirectional layer by 0.30
    from posenc.attention import MultiHeadAttention

    with pytest.raises(ValueError, match="KV caches need a causal model"):
        _tiny_lm(causal=False).new_caches()
    with pytest.raises(ValueError, match="a KV cache needs causal attention"):
        MultiHeadAttention(16, 2, causal=False)(torch.randn(1, 3, 16), cache=KVCache())
    encoder = _tiny_lm(causal=False)
    with pytest.raises(ValueError, match="a KV cache needs causal attention"):
        encoder(torch.zeros(1, 4, dtype=torch.long), caches=[KVCache(), KVCache()])


def test_an_undeclared_additive_encoding_is_refused_a_cache_whose_positions_move():
    # kind "additive" used to inherit follows_moving_positions = True: a sink cache was accepted for it
    from posenc.encodings import resolve_positions

    class Ramp(posenc.PositionalEncoding):
        kind = "additive"

        def embed(self, x, positions=None):
            positions = resolve_positions(positions, x, seq_dim=1)
            return x + positions[..., None].to(x.dtype) / 100

    assert Ramp().capabilities.follows_moving_positions is False
    model = TransformerLM(32, d_model=16, n_layers=1, n_heads=2, encoding=Ramp())
    with pytest.raises(ValueError, match="a cache keeping sinks and a window needs an encoding"):
        model.new_caches(sinks=1, window=4)


def test_an_undeclared_rotary_encoding_has_its_keys_rotated_at_every_call():
    # the safe answer for a rotation posenc cannot see into: keys cached unrotated, decoding exact
    from posenc.encodings import resolve_positions

    class CallCentredTurn(posenc.PositionalEncoding):
        """Turns by the distance from the first query of the call: not cacheable once rotated."""

        kind = "rotary"

        def rotate(self, q, k, q_positions=None, k_positions=None):
            q_positions = resolve_positions(q_positions, q, seq_dim=2)
            k_positions = resolve_positions(k_positions, k, seq_dim=2)
            centre = q_positions.min()
            return _turn(q, q_positions - centre), _turn(k, k_positions - centre)

    def _turn(x, positions):
        angle = positions.to(x.dtype)[..., None] * 0.3  # [s, 1]
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack(
            (even * angle.cos() - odd * angle.sin(), even * angle.sin() + odd * angle.cos()), -1
        ).flatten(-2)

    encoding = CallCentredTurn()
    assert encoding.capabilities.rotated_keys_are_cacheable is False
    torch.manual_seed(0)
    model = TransformerLM(32, d_model=16, n_layers=2, n_heads=2, encoding=encoding)
    tokens = torch.randint(0, 32, (1, 9))
    full = model(tokens)
    caches = model.new_caches()
    steps = [model(tokens[:, :5], caches=caches)] + [
        model(tokens[:, t : t + 1], caches=caches) for t in range(5, 9)
    ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)
