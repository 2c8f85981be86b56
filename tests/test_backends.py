"""One vocabulary of backend names: each consumer's names, their meanings, aliases and refusals."""

from __future__ import annotations

import re

import pytest
import torch

from posenc import backends
from posenc.functional import apply_rope, apply_rope_qk, rope_cos_sin, rope_inv_freq


def test_each_consumer_takes_its_names_and_every_name_has_a_meaning():
    assert backends.ROPE == ("auto", "eager", "native", "triton")
    assert backends.ATTENTION == ("eager", "sdpa", "flex")
    for consumer, names in backends.CONSUMERS.items():
        for name in names:
            assert backends.check_backend(consumer, name) == name
            assert backends.MEANINGS[name] and "\n" not in backends.MEANINGS[name]
    assert list(backends.describe("rope")) == list(backends.ROPE)


def test_eager_means_the_reference_for_every_consumer():
    assert "eager" in backends.ROPE and "eager" in backends.ATTENTION
    assert "reference" in backends.MEANINGS["eager"]


@pytest.mark.parametrize(("alias", "name"), [("reference", "eager"), ("cpu", "native")])
def test_ropes_older_names_stand_for_the_new_ones(alias, name):
    assert backends.check_backend("rope", alias) == name
    x = torch.randn(1, 2, 5, 8).to(torch.bfloat16)
    cos, sin = rope_cos_sin(5, rope_inv_freq(8)[0])
    assert torch.equal(apply_rope(x, cos, sin, backend=alias), apply_rope(x, cos, sin, backend=name))


@pytest.mark.parametrize(
    ("consumer", "backend", "message"),
    [
        (
            "rope",
            "cuda",
            "backend must be one of 'auto', 'eager', 'native', 'triton' (aliases: 'reference' for 'eager', "
            "'cpu' for 'native'); got 'cuda'",
        ),
        ("rope", "sdpa", "backend must be one of 'auto', 'eager', 'native', 'triton'"),
        ("attention", "triton", "backend must be one of 'eager', 'sdpa', 'flex'; got 'triton'"),
        ("attention", "reference", "backend must be one of 'eager', 'sdpa', 'flex'; got 'reference'"),
        ("attention", "auto", "backend must be one of 'eager', 'sdpa', 'flex'; got 'auto'"),
    ],
)
def test_unknown_names_are_refused_listing_the_valid_ones(consumer, backend, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        backends.check_backend(consumer, backend)


def test_a_name_that_is_not_a_string_and_an_unknown_consumer_are_refused():
    with pytest.raises(TypeError, match=r"backend must be a string naming a backend, got None \(NoneType\)"):
        backends.check_backend("rope", None)
    with pytest.raises(ValueError, match="consumer must be one of 'rope', 'attention'; got 'alibi'"):
        backends.check_backend("alibi", "eager")


def test_apply_rope_qk_refuses_an_unknown_backend_before_rotating_anything():
    q, k = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    before = q.clone()
    cos, sin = rope_cos_sin(4, rope_inv_freq(8)[0])
    with pytest.raises(ValueError, match="backend must be one of 'auto', 'eager', 'native', 'triton'"):
        apply_rope_qk(q, k, cos, sin, inplace=True, backend="fast")
    assert torch.equal(q, before)


def test_the_module_is_a_leaf():
    import ast
    from pathlib import Path

    tree = ast.parse(Path(backends.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not [name for name in imported if name and name.startswith("posenc")]
