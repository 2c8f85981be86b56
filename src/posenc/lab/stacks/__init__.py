"""Stacks the lab trains like an encoding: a name for a model whose layers differ (:mod:`posenc.stacks`).

A stack design is one file in this package with one :func:`register_stack` line, a pattern of layer
specs repeated over the model's layers::

    register_stack("rnope", pattern("RRRN", R=layer("rope"), N=layer("nope")), "RNoPE", "arXiv 2501.18795")

Its name stands where a run names an encoding (``posenc lab run --encodings rnope``): the run's
``encoding_kwargs`` record the layers it expands to (so a changed design is a new run), the model is
``TransformerLM(encoding=stack.encoding, layers=stack.layers, share_encoding=False)`` (every layer its
own copy of an encoding with parameters, as FoX's per-layer gates), and the reports list it beside the
encodings. A stack name may not be an encoding's.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass

from posenc.encodings import available, describe, encoding_class
from posenc.stacks import LayerSpec, Pattern

#: posenc's own stack designs, each module registering one.
BUILT_IN = (
    "posenc.lab.stacks.rnope",
    "posenc.lab.stacks.rnope_swa",
    "posenc.lab.stacks.rnope_temperature",
    "posenc.lab.stacks.fox",
)
_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True, eq=False)
class Stack:
    """A registered stack design."""

    name: str  # the registered name, where runs name an encoding
    layers: Pattern  # the layer specs, repeated over the model's layers
    label: str  # how tables name it ("RNoPE-SWA")
    paper: str  # where it comes from ("arXiv 2501.18795")
    encoding: str = "nope"  # the model's encoding: what a layer without one of its own takes

    def specs(self, n_layers: int) -> list[LayerSpec]:
        """One spec per layer of an ``n_layers`` model (a ValueError where the pattern does not cover it)."""
        return self.layers.expand(n_layers)

    def encodings(self) -> list[str]:
        """The registered encodings its layers name (and the model's own)."""
        names = [self.encoding, *(spec.encoding for spec in self.layers.specs.values())]
        return list(dict.fromkeys(name for name in names if isinstance(name, str)))


REGISTRY: dict[str, Stack] = {}
_built_in_loaded = False


def _load_built_in() -> None:
    global _built_in_loaded
    if not _built_in_loaded:
        _built_in_loaded = True
        for module in BUILT_IN:
            importlib.import_module(module)


def register_stack(name: str, layers: Pattern, label: str, paper: str, *, encoding: str = "nope") -> Stack:
    """Register a stack design as ``name``; every lab command then takes it where it takes an encoding.

    Raises:
        ValueError: a name that is not lower-case letters, digits and underscores, one an encoding or
            another stack has, or a layer naming an unregistered encoding.
        TypeError: ``layers`` not a :func:`posenc.stacks.pattern`.
    """
    _load_built_in()
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"a stack name is lower-case letters, digits and underscores, got {name!r}")
    if name in available():
        raise ValueError(f"stack name {name!r} is a registered encoding's: a run could not tell them apart")
    if name in REGISTRY:
        raise ValueError(f"stack name {name!r} is taken by {REGISTRY[name].label}")
    if not isinstance(layers, Pattern):
        raise TypeError(f"a stack's layers are a pattern(...) of layer specs, got {type(layers).__name__}")
    stack = Stack(name, layers, label, paper, encoding)
    for encoding_name in stack.encodings():
        encoding_class(encoding_name)  # an unknown name: the registry's error, listing the valid ones
    REGISTRY[name] = stack
    return stack


def unregister_stack(name: str) -> None:
    """Forget the stack registered as ``name`` (a KeyError naming it when there is none)."""
    _load_built_in()
    if name not in REGISTRY:
        raise KeyError(f"no stack is registered as {name!r}")
    del REGISTRY[name]


def stack_names() -> tuple[str, ...]:
    """The registered stacks, in the order registered."""
    _load_built_in()
    return tuple(REGISTRY)


def stack_named(name: str) -> Stack | None:
    """The stack registered as ``name``, or None (an encoding's name, or nothing)."""
    _load_built_in()
    return REGISTRY.get(name)


def recorded_arguments(stack: Stack, n_layers: int) -> dict:
    """What a run of ``stack`` records as its encoding arguments: the layers it expands to, written out."""
    return {"stack": stack.name, "layers": [repr(spec) for spec in stack.specs(n_layers)]}


def model_arguments(stack: Stack, recorded: dict, n_layers: int) -> dict:
    """``TransformerLM``'s arguments for a run of ``stack`` whose config recorded ``recorded``.

    Raises:
        ValueError: the design registered now is not the one the run recorded (its layers changed).
    """
    if recorded != recorded_arguments(stack, n_layers):
        raise ValueError(
            f"stack {stack.name!r} is now {recorded_arguments(stack, n_layers)['layers']}, but the run recorded "
            f"{recorded.get('layers')!r}: a changed design is a new run, not this one"
        )
    return {"encoding": stack.encoding, "layers": stack.layers, "share_encoding": False}


def skip_reason(stack: Stack, axes: int, causal: bool, sizes: dict) -> str | None:
    """Why the lab does not train ``stack`` on a task of ``axes`` position axes (causal or not): the first
    refusal of any encoding its layers name, as :func:`posenc.lab.presets.skip_reason` asks each one."""
    for name in stack.encodings():
        reason = describe(name).lab_skip_reason(axes)
        if reason is not None:
            return f"{stack.label}'s {name} layers: {reason}"
        try:
            encoding_class(name).model_arguments(**sizes, causal=causal)
        except ValueError as refusal:
            return f"{stack.label}'s {name} layers: {refusal}"
    return None


__all__ = [
    "BUILT_IN",
    "REGISTRY",
    "Stack",
    "model_arguments",
    "recorded_arguments",
    "register_stack",
    "skip_reason",
    "stack_named",
    "stack_names",
    "unregister_stack",
]
