"""Backend names: one vocabulary for every computation posenc can run more than one way.

A backend names *how* a result is computed, never *what*: every backend a consumer accepts returns
the same function of its inputs (within the numerics each documents). The same word means the same
idea everywhere: ``"eager"`` is always the plain torch recipe that the others are checked against.

Consumers and the names they take:

- RoPE (:func:`posenc.functional.apply_rope`, :func:`posenc.functional.apply_rope_qk`):
  :data:`ROPE`, and the older names ``"reference"`` and ``"cpu"`` (:data:`ALIASES`).
- attention (:class:`posenc.attention.MultiHeadAttention`): :data:`ATTENTION`.

This module imports nothing of posenc, so every layer may use it.
"""

from __future__ import annotations

#: Every backend name, with its one-line meaning.
MEANINGS: dict[str, str] = {
    "auto": "pick per call: the fastest backend that applies to these tensors, else eager",
    "eager": "plain torch ops, the reference (attention: explicit float32 scores and softmax; "
    "RoPE: the reference recipe, products in the input dtype)",
    "sdpa": "attention through torch's scaled_dot_product_attention",
    "flex": "attention through torch's flex_attention and the encoding's score_mod",
    "native": "posenc's C kernel on CPU, compiled on first use (with its own torch fallback where "
    "no C compiler works or POSENC_NATIVE=0)",
    "triton": "posenc's Triton kernel on CUDA (CPU tensors under TRITON_INTERPRET=1, for tests)",
}

#: The backends of RoPE's apply_rope and apply_rope_qk.
ROPE = ("auto", "eager", "native", "triton")
#: The backends of MultiHeadAttention.
ATTENTION = ("eager", "sdpa", "flex")

#: consumer -> the names it accepts.
CONSUMERS: dict[str, tuple[str, ...]] = {"rope": ROPE, "attention": ATTENTION}

#: consumer -> {older name: the name it stands for}; accepted and documented, never printed back.
ALIASES: dict[str, dict[str, str]] = {
    "rope": {"reference": "eager", "cpu": "native"},
    "attention": {},
}


def check_backend(consumer: str, backend: object, *, name: str = "backend") -> str:
    """``backend``'s own name for ``consumer`` (an alias resolved to the name it stands for).

    Args:
        consumer: a key of :data:`CONSUMERS` (``"rope"`` or ``"attention"``).
        backend: the name given by the caller.
        name: the argument's name in error messages.

    Raises:
        ValueError: an unknown consumer, or a name ``consumer`` does not take (the message lists the
            valid names and aliases).
        TypeError: ``backend`` is not a string.
    """
    if consumer not in CONSUMERS:
        raise ValueError(f"consumer must be one of {_listed(CONSUMERS)}; got {consumer!r}")
    if not isinstance(backend, str):
        raise TypeError(
            f"{name} must be a string naming a backend, got {backend!r} ({type(backend).__name__})"
        )
    valid, aliases = CONSUMERS[consumer], ALIASES[consumer]
    if backend in valid:
        return backend
    if backend in aliases:
        return aliases[backend]
    known = f" (aliases: {', '.join(f'{a!r} for {b!r}' for a, b in aliases.items())})" if aliases else ""
    raise ValueError(f"{name} must be one of {_listed(valid)}{known}; got {backend!r}")


def describe(consumer: str) -> dict[str, str]:
    """name -> meaning for the backends ``consumer`` takes, in order."""
    if consumer not in CONSUMERS:
        raise ValueError(f"consumer must be one of {_listed(CONSUMERS)}; got {consumer!r}")
    return {backend: MEANINGS[backend] for backend in CONSUMERS[consumer]}


def _listed(names) -> str:
    return ", ".join(repr(n) for n in names)
