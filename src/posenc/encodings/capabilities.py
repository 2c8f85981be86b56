"""What an encoding may be asked to do (caches, masks, temperature, what analysis may assume), declared
in one object whose defaults follow from the encoding's kind and the hooks it defines.

An encoding that declares nothing gets the safe answer: a refusal or a recomputation, never a wrong
cache or a silently ignored hook. A class declares what differs with ``declare``::

    class StickBreaking(PositionalEncoding):
        capabilities = declare(contextual_positions=True, follows_documents=False)

and an encoding whose capabilities follow its settings replaces fields of its class's in ``__init__``,
``self.capabilities = dataclasses.replace(type(self).capabilities, two_sided=self.bidirectional)`` (T5):
a constant that attention reads under ``torch.compile`` as any attribute. Readers take
``encoding.capabilities.<field>``; ``type(encoding).capabilities`` is the class's, before settings.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Capabilities:
    """What attention, caches, masks and analysis may do with an encoding.

    Attributes:
        acts_in_attention: attention's hooks (rotate, bias, score_mod, the terms) do something. Default:
            False for the additive and none kinds, True for any other (the hooks are then called).
        rotated_keys_are_cacheable: a key rotated once stays right for every later query, so a KV cache
            may hold rotated keys; where False attention caches keys unrotated and rotates them with each
            call's queries. Default: True where ``rotate`` is the identity, False for a rotary encoding
            (recomputed: right whatever the rotation reads).
        follows_moving_positions: the encoding follows positions that move in a cache (StreamingLLM's
            sinks and window). Default: False for an additive encoding (a cached key keeps the code of the
            place it entered at) and for any kind posenc does not know; True where positions are read in
            attention (rotary, bias) or not at all (none).
        accepts_query_temperature: attention may multiply the queries by a factor of their position
            (Llama 4's temperature tuning, SSMax). Default: True where the query enters the scores only
            through products with keys (the four known kinds), False where positions are counted from
            the content (the counts would change with the factor) and for an unknown kind.
        two_sided: keys after the query get a bias of their own (bidirectional attention); analysis then
            measures both sides of the query. Default: False (causal attention's view).
        follows_documents: packed documents (attention's document mask) give each document what it gets
            alone: false where a query's weights read keys it does not see (stick-breaking's leftover
            stick); attention then refuses documents. Default: True.
        reads_content: the encoding reads each token's layer input through ``content`` (FoX's gates,
            PaTH's Householder vectors). Default: True where the class defines ``content``.
        reads_attention_weights: the encoding adds ``value_terms`` to the output, so attention computes
            the weights explicitly (the eager path). Default: True where the class defines
            ``value_terms`` (never silently ignored).
        contextual_positions: positions are counted from the content (CoPE's gates on q·k) rather than
            read from those given; the relative-position test then says so. Default: False.
        draws_per_call: in training, each call of ``rotate`` draws from the encoding's own seeded generator
            (coordinate augmentation): a model then gives every layer a copy with the same generator state,
            so that all layers read one draw per forward (DINOv3's blocks share one draw); one instance
            shared by the layers would draw again in each. Default: False.
    """

    acts_in_attention: bool
    rotated_keys_are_cacheable: bool
    follows_moving_positions: bool
    accepts_query_temperature: bool
    two_sided: bool
    follows_documents: bool
    reads_content: bool
    reads_attention_weights: bool
    contextual_positions: bool
    draws_per_call: bool


#: The names a declaration may set.
FIELDS = tuple(field.name for field in fields(Capabilities))


@dataclass(frozen=True)
class Declaration:
    """What a class declares of its capabilities (the rest follow from its kind): see :func:`declare`."""

    values: tuple[tuple[str, bool], ...]

    def as_dict(self) -> dict[str, bool]:
        return dict(self.values)


def declare(**values: bool) -> Declaration:
    """A class's declaration of the capabilities in which it differs from its kind's defaults.

    Raises:
        TypeError: a name that is not a field of :class:`Capabilities`, or a value that is not a bool.
    """
    for name, value in values.items():
        if name not in FIELDS:
            raise TypeError(f"{name!r} is not a capability; the capabilities are {', '.join(FIELDS)}")
        if not isinstance(value, bool):
            raise TypeError(f"capability {name} must be True or False, got {value!r}")
    return Declaration(tuple(values.items()))


def derive(
    kind: str, declared: dict[str, bool], *, defines_content: bool, defines_value_terms: bool
) -> Capabilities:
    """The capabilities of a class of ``kind`` that declares ``declared`` and defines the given hooks."""
    contextual = declared.get("contextual_positions", False)
    reads_content = declared.get("reads_content", defines_content)
    defaults = {
        "acts_in_attention": kind not in ("additive", "none"),
        "rotated_keys_are_cacheable": kind != "rotary",
        "follows_moving_positions": kind in ("rotary", "bias", "none"),
        "accepts_query_temperature": kind in ("rotary", "bias", "additive", "none") and not contextual,
        "two_sided": False,
        "follows_documents": True,
        "reads_content": reads_content,
        "reads_attention_weights": defines_value_terms,
        "contextual_positions": contextual,
        "draws_per_call": False,
    }
    return Capabilities(**{**defaults, **declared})
