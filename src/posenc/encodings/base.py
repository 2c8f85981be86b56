"""The one interface through which every positional encoding acts on a transformer, and describes itself.

Seed 004 (§8.2) names three places an encoding can act: added to (or concatenated with) the token
embeddings, rotating queries and keys, or biasing the attention scores. Every encoding has every
hook below; the ones that do not apply are identities or return None, so attention never branches
on the type of encoding. Where an encoding gives a bias only, the flex score_mod is derived from it;
where it gives a score_mod only, the bias is derived from that.

An encoding also says, in its own file, how to build it for a model of a given shape
(``model_arguments``) and its parameter count (``count_parameters``). What posenc says about it (its
label, seed 004's row, figures, specimen, lab applicability and cells of ``posenc list``) is a
:class:`~posenc.encodings.description.Description` given to ``register``. Analysis, figures and the
report read only the views it declares (``views``: ``codes``, ``rotation_tables``, ``frequencies`` …)
and skip, with a reason, what needs one it lacks.

Notation used for tensor shapes:
    b batch, s sequence, h heads, d width (d_head per head), i / j query / key positions.

Positions are explicit tensors: integers ``[s]`` (shared by the batch) or ``[b, s]`` on one axis,
coordinates ``[s, n]`` or ``[b, s, n]`` on n axes (integer or float; see ``position_space``);
``None`` means ``arange(s)``. A KV-cache offset or a packed sequence is expressed as
positions, so one contract covers training, decoding and packing.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from posenc._validation import as_coordinates, as_positions, check_float_tensor, row_shapes, same_shape
from posenc.encodings.capabilities import FIELDS, Capabilities, Declaration, derive
from posenc.encodings.description import NOT_DECLARED as NOT_DECLARED  # re-exported, as before
from posenc.encodings.description import PLACES as PLACES
from posenc.encodings.description import SPECIMEN_MODEL
from posenc.encodings.description import SeedRow as SeedRow

KINDS = ("additive", "rotary", "bias", "none")
#: The sizes of a model an encoding may take from it, as constructor argument names.
MODEL_SIZES = ("d_model", "n_heads", "d_head", "max_len")
#: The views an encoding may give, by the name ``views`` declares each under (the method of that name;
#: "frequencies" also ``frequency_pieces``, "bias" also ``score_mod``: a bias of positions alone).
VIEWS = (
    "codes",
    "rotation_tables",
    "frequencies",
    "rotary_spectrum",
    "bias",
    "distance_bias",
    "bucketing",
    "bucket_table",
    "offset_table",
    "counted_positions",
    "closed_form_dot",
    "shift_map",
    "translations",
)
#: Names that each said one thing about positions, now fields of :class:`PositionSpace`: a class that
#: defines one is refused (it would be silently ignored).
_OLD_POSITION_NAMES = ("position_columns", "position_axes", "position_limit")
#: The methods whose definition in a class declares a view where the class declares no ``views``.
_VIEW_METHODS = {"frequencies": ("frequency_pieces",), "bias": ("bias", "score_mod")}


def trainable_parameters(module: nn.Module) -> int:
    """The number of learned (trainable) parameters of ``module``."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def resolve_positions(
    positions: torch.Tensor | None,
    x: torch.Tensor,
    *,
    seq_dim: int,
    columns: int = 1,
    start: int | torch.Tensor = 0,
    name: str = "positions",
    float_line: bool = False,
) -> torch.Tensor:
    """Positions for the sequence axis ``seq_dim`` of x, on x's device (errors call them ``name``).

    One column (``columns=1``): ``[s]`` or ``[b, s]``, int64. Several (positions on n axes):
    ``[s, n]`` or ``[b, s, n]``, int64 or float64 (:func:`posenc._validation.as_coordinates`); with
    ``float_line``, float positions on one axis too, float64 (an encoding that turns by any real position,
    RoPE: continuous positions). A batch
    axis of 1 (``[1, s]``, ``[1, s, n]``) holds for every row and is returned without it.
    None means ``start … start + s − 1``, on every axis (the diagonal, where M-RoPE puts text); a
    ``start`` of int64 ``[b]``, one per row, gives ``[b, s]`` / ``[b, s, n]``.

    Raises:
        ValueError: non-integer positions on one axis, non-finite coordinates, a shape that does not
            match x or the number of columns.
    """
    seq_len = x.shape[seq_dim]
    if positions is None:
        line = _line(start, seq_len, x.device)  # [s] or [b, s]
        return line if columns == 1 else line.unsqueeze(-1).expand(*line.shape, columns)
    batch = x.shape[0]
    if columns == 1 and float_line and isinstance(positions, torch.Tensor) and positions.is_floating_point():
        positions = as_coordinates(positions.unsqueeze(-1), 1, device=x.device, name=name)[..., 0]
        row = (seq_len,)
    elif columns == 1:
        positions = as_positions(positions, device=x.device, name=name)
        row = (seq_len,)
    else:
        positions = as_coordinates(positions, columns, device=x.device, name=name)
        row = (seq_len, columns)
    if same_shape(positions.shape, (1, *row)):  # one row for the whole batch (transformers' [1, s] ids)
        positions = positions[0]
    if same_shape(positions.shape, row) or same_shape(positions.shape, (batch, *row)):
        return positions
    raise ValueError(
        f"{name} must have shape {row_shapes(row, batch)} to match an input of shape {tuple(x.shape)}, "
        f"got {tuple(positions.shape)}"
    )


def query_key_positions(
    q: torch.Tensor,
    k: torch.Tensor,
    q_positions: torch.Tensor | None,
    k_positions: torch.Tensor | None,
    *,
    columns: int = 1,
    key_dim: int = 2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions of the queries ``[b, h, i, d]`` and keys ``[b, h_kv, j, d]``, checked against them.

    Each is ``[i]`` or ``[b, i]`` (``[j]`` / ``[b, j]``), or with ``columns`` n > 1 coordinates ``[i, n]`` or
    ``[b, i, n]`` (:func:`resolve_positions`). None means keys 0 … j − 1 and queries the last i of them,
    as in decoding. Positions of another length or batch would broadcast into the terms of other tokens.
    ``key_dim``: k's sequence axis (3 where k is the attention weights ``[b, h, i, j]``).

    Raises:
        ValueError: positions whose shape does not match q or k (the expected shapes named), and
            the errors of :func:`resolve_positions`.
    """
    q_len, k_len = q.shape[2], k.shape[key_dim]
    start = k_len - q_len if q_len <= k_len else 0
    q_positions = resolve_positions(
        q_positions, q, seq_dim=2, columns=columns, start=start, name="q_positions"
    )
    k_positions = resolve_positions(k_positions, k, seq_dim=key_dim, columns=columns, name="k_positions")
    return q_positions, k_positions


def _line(start: int | torch.Tensor, seq_len: int, device: torch.device) -> torch.Tensor:
    """``start … start + s − 1``: ``[s]`` from an int, ``[b, s]`` from a start per row ``[b]``."""
    if isinstance(start, torch.Tensor):
        return start.to(device=device, dtype=torch.int64)[:, None] + torch.arange(seq_len, device=device)
    return torch.arange(start, start + seq_len, device=device)


@dataclass(frozen=True)
class RotarySpectrum:
    """What a rotation turns: its rotated channels r, the base of its unscaled θ_k = base^(−2k/r), the
    layout pairing its channels (``"half"``: k with k + r/2; ``"interleaved"``: 2k with 2k + 1), counted
    from the first rotated channel, and where the d − r channels that do not turn sit: ``"last"``, after
    the rotated ones (GPT-NeoX; the default), or ``"first"``, before them (LTX-Video)."""

    rotary_dim: int
    base: float
    layout: str
    unrotated: str = "last"


@dataclass(frozen=True)
class PositionSpace:
    """What positions an encoding takes.

    Attributes:
        columns: columns of a position tensor: 1 for ``[s]`` / ``[b, s]`` (Swin's window index included),
            n for coordinates on n axes, ``[s, n]`` / ``[b, s, n]``.
        axes: coordinates a position stands for: 1 for a place in a sequence; 2 where an integer position
            is the row-major index of a token in a 2-D window (Swin), so that i − j is no distance.
        limit: positions 0 … limit − 1 are all the encoding can represent (a learned table's size);
            None: any.
    """

    columns: int = 1
    axes: int = 1
    limit: int | None = None


def constructor_arguments(cls: type[PositionalEncoding]) -> list[str]:
    """The keyword arguments an encoding's constructor takes: its own, and, where it passes ``**kwargs`` on,
    those of the parent it passes them to (a variant with other defaults takes its parent's)."""
    names: list[str] = []
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        parameters = inspect.signature(vars(klass)["__init__"]).parameters.values()
        names += [
            p.name
            for p in parameters
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in names
        ]
        if not any(p.kind == p.VAR_KEYWORD for p in parameters) or klass is PositionalEncoding:
            break
    return names


def defined_views(cls: type[PositionalEncoding]) -> frozenset[str]:
    """The views whose method ``cls`` defines (the base defines none but ``bias``/``score_mod``, which it
    overrides): the views of a class that declares no ``views``."""
    return frozenset(
        view
        for view in VIEWS
        if any(
            getattr(cls, m, None) is not getattr(PositionalEncoding, m, None)
            for m in _VIEW_METHODS.get(view, (view,))
        )
    )


class PositionalEncoding(nn.Module):
    """Base class: every hook has a working default; subclasses override the ones where they act.

    Class attributes:
        kind: ``"additive"`` (acts on embeddings), ``"rotary"`` (rotates q and k),
            ``"bias"`` (biases attention scores) or ``"none"`` (the NoPE control).
        d_model, n_heads, d_head, max_len: the model sizes the instance was built for, where it keeps
            them under these names (None: it keeps none, e.g. a rotation that turns any width).
            Analysis probes ``rotate`` with ``d_head``-wide heads, and ``embed`` with ``d_model``-wide
            tokens, where they are given.
    """

    kind: str = "none"
    d_model: int | None = None
    n_heads: int | None = None
    d_head: int | None = None
    max_len: int | None = None
    #: Buffers derived from hyper-parameters and kept in float64: a dtype conversion of the module
    #: (``.to(torch.bfloat16)``) empties them instead of rounding them; they are rebuilt on demand.
    _exact_buffers: tuple[str, ...] = ()
    #: What caches, masks, temperature and analysis may do with it (:mod:`posenc.encodings.capabilities`):
    #: a class declares where it differs from its kind with ``capabilities = declare(...)``; an instance
    #: whose settings decide sets ``self.capabilities = replace(type(self).capabilities, ...)`` in its
    #: ``__init__``. Nothing declared gives the kind's safe answers.
    capabilities: Capabilities = derive("none", {}, defines_content=False, defines_value_terms=False)
    _declared: ClassVar[dict[str, bool]] = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        old = sorted(name for name in FIELDS if name in vars(cls))
        if old:
            raise TypeError(
                f"{cls.__name__} sets {', '.join(old)} on the class: capabilities are declared in one place, "
                f"capabilities = declare({old[0]}=...) (posenc.encodings.capabilities)"
            )
        old = sorted(name for name in _OLD_POSITION_NAMES if name in vars(cls))
        if old:
            raise TypeError(
                f"{cls.__name__} defines {', '.join(old)}: what positions an encoding takes is one "
                "position_space property returning PositionSpace(columns=, axes=, limit=)"
            )
        own = vars(cls).get("capabilities")
        if own is not None and not isinstance(own, Declaration):
            raise TypeError(
                f"{cls.__name__}.capabilities must be declare(...) on the class (an instance whose settings "
                f"decide sets self.capabilities in __init__), got {type(own).__name__}"
            )
        cls._declared = {**cls._declared, **(own.as_dict() if own is not None else {})}
        cls.capabilities = derive(
            cls.kind,
            cls._declared,
            defines_content=cls.content is not PositionalEncoding.content,
            defines_value_terms=cls.value_terms is not PositionalEncoding.value_terms,
        )

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        for name in self._exact_buffers:
            buffer = getattr(self, name)
            if buffer.dtype != torch.float64:
                setattr(
                    self, name, torch.empty((0, *buffer.shape[1:]), dtype=torch.float64, device=buffer.device)
                )
        return self

    # --- what it is, for the rest of posenc ---------------------------------------------------------

    @classmethod
    def model_arguments(cls, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
        """Constructor arguments that fit a model of this shape: the sizes the constructor takes
        among d_model, n_heads, d_head = d_model / n_heads and max_len. Override to add more (e.g. a
        symmetric bias for a bidirectional model)."""
        sizes = {"d_model": d_model, "n_heads": n_heads, "d_head": d_model // n_heads, "max_len": max_len}
        accepted = constructor_arguments(cls)
        return {name: value for name, value in sizes.items() if name in accepted}

    def for_grid(self, trained: tuple[int, ...], grid: tuple[int, ...]) -> PositionalEncoding:
        """The encoding a model trained on ``trained``-sized grids of patches uses on ``grid``-sized ones
        (a ViT used at a new resolution). Default: itself, reading the new grid's coordinates; a learned
        table overrides this with its table resampled to the new grid."""
        return self

    def count_parameters(self, max_len: int, d_model: int, n_heads: int) -> int | None:
        """The learned parameters at L = max_len, d = d_model, h = n_heads, with this instance's other
        settings (T5's ``num_buckets``, Swin's ``window``): an encoding with a formula overrides this.

        Default: counted, never a formula. A size given as 0 stands for the instance's own. Where every
        size the constructor takes (``model_arguments``) is the one the instance keeps, this instance's
        trainable parameters; otherwise those of an instance built at these sizes through
        ``model_arguments`` (its other settings at their defaults); None where that build fails.
        """
        arguments = self._arguments_at(max_len, d_model, n_heads)
        if arguments is None:
            return None
        if all(getattr(self, size) == arguments[size] for size in MODEL_SIZES if size in arguments):
            return trainable_parameters(self)
        try:
            with torch.random.fork_rng(devices=[]):  # a fresh table must not move the caller's RNG
                return trainable_parameters(type(self)(**arguments))
        except (TypeError, ValueError):
            return None

    def _arguments_at(self, max_len: int, d_model: int, n_heads: int) -> dict | None:
        """Constructor arguments for a model of these sizes (0: this instance's own size, else the
        specimen model's); None where ``model_arguments`` refuses them."""
        given = {"max_len": max_len, "d_model": d_model, "n_heads": n_heads}
        sizes = {name: value or getattr(self, name) or SPECIMEN_MODEL[name] for name, value in given.items()}
        try:
            arguments = type(self).model_arguments(**sizes, causal=SPECIMEN_MODEL["causal"])
        except (TypeError, ValueError):
            return None
        if "d_head" in arguments and self.d_head is not None and not (d_model and n_heads):
            arguments["d_head"] = self.d_head  # d_model / n_heads is not known: keep the instance's own
        return arguments

    @property
    def position_space(self) -> PositionSpace:
        """What positions the encoding takes (columns, axes, limit): one integer column, unbounded, here."""
        return PositionSpace()

    # --- the views analysis reads (their methods live on the encodings that give them) ----------------

    @property
    def views(self) -> frozenset[str]:
        """The views (names of :data:`VIEWS`) this encoding gives: analysis, figures and the report read
        these through :func:`posenc.encodings.views.view` and no others, and never call a view to learn
        whether it is there. The base defines none of their methods: an encoding gives a view by defining
        its method (signatures in :mod:`posenc.encodings.views`). Undeclared: those whose method the class
        defines (:func:`defined_views`). A class attribute ``views`` declares them; an encoding whose views
        follow its settings overrides this property (RoPE-Mixed gives no tables)."""
        return defined_views(type(self))

    # --- the hooks attention calls ------------------------------------------------------------------

    def output_width(self, input_width: int) -> int:
        """Width of ``embed``'s output for an input of width ``input_width``."""
        return input_width

    def embed(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Token embeddings ``[b, s, d]`` -> ``[b, s, d']`` with position information (d' ≥ d)."""
        return check_float_tensor("x", x)

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries ``[b, h, i, d_head]`` and keys ``[b, h, j, d_head]`` -> rotated (q, k), same shapes."""
        return check_float_tensor("q", q), check_float_tensor("k", k)

    def logit_scale(self, d_head: int) -> float:
        """The factor on q·kᵀ in the attention logits, a host float: d_head^(−1/2) here (Vaswani et al.,
        2017, https://arxiv.org/abs/1706.03762).

        Attention multiplies q·kᵀ by it on every backend, before the bias and score terms are added.
        An encoding whose scheme changes the softmax temperature overrides it (RoPE with DeepSeek's
        YaRN: mscale(factor, mscale_all_dim)² · d_head^(−1/2)).
        """
        return d_head**-0.5

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor | None:
        """Additive attention-score bias ``[h, i, j]`` or ``[b, h, i, j]``, or None.

        Default: None, or, for an encoding that gives only a ``score_mod``, that score_mod evaluated
        on index grids (``n_heads`` heads).
        """
        if type(self).score_mod is PositionalEncoding.score_mod:
            return None
        q_positions, k_positions = as_positions(q_positions), as_positions(k_positions)
        h = self.n_heads
        if h is None:
            raise ValueError(f"{type(self).__name__} gives only a score_mod; deriving its bias needs n_heads")
        score_mod = self.score_mod(q_positions=q_positions, k_positions=k_positions)
        batched = [p.shape[0] for p in (q_positions, k_positions) if p.dim() == 2]
        b, i, j = (batched[0] if batched else 1), q_positions.shape[-1], k_positions.shape[-1]
        device = q_positions.device
        grids = (
            torch.arange(b, device=device).view(b, 1, 1, 1),
            torch.arange(h, device=device).view(1, h, 1, 1),
            torch.arange(i, device=device).view(1, 1, i, 1),
            torch.arange(j, device=device).view(1, 1, 1, j),
        )
        bias = score_mod(torch.zeros(b, h, i, j, dtype=torch.float32, device=device), *grids)  # [b, h, i, j]
        return bias if q_positions.dim() == 2 or k_positions.dim() == 2 else bias[0]

    def score_mod(
        self,
        q_offset: int = 0,
        kv_offset: int = 0,
        *,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
    ) -> Callable | None:
        """A ``flex_attention`` score_mod ``(score, b, h, q_idx, kv_idx) -> score`` adding the bias, or None.

        Positions are ``q_positions`` / ``k_positions`` when given, else index + offset. Default:
        None, or, for an encoding that gives only a ``bias``, a lookup into that bias materialised
        for these positions (correct everywhere; an encoding that can compute its bias per score
        should override this).
        """
        if type(self).bias is PositionalEncoding.bias:
            return None
        if q_positions is None or k_positions is None:
            raise ValueError(
                f"{type(self).__name__} derives its score_mod from its bias and needs q_positions and k_positions"
            )
        bias = self.bias(q_positions, k_positions)  # [h, i, j] or [b, h, i, j]
        if bias is None:
            return None
        if bias.dim() == 3:
            return lambda score, b, h, q_idx, kv_idx: score + bias[h, q_idx, kv_idx].to(score.dtype)
        return lambda score, b, h, q_idx, kv_idx: score + bias[b, h, q_idx, kv_idx].to(score.dtype)

    def score_terms(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        *,
        project: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> torch.Tensor | None:
        """Logit terms ``[b, h, i, j]`` that read the (rotated) queries ``[b, h, i, d]`` and keys
        ``[b, h_kv, j, d]`` as well as positions (the relative schemes of Shaw et al., Transformer-XL,
        DeBERTa, CoPE), added to q·kᵀ/√d; None here.

        ``project``: the attention layer's own query and key projections, ``[n, d_model] -> ([h, n, d],
        [h_kv, n, d])`` (no positions applied), for a scheme that projects its position embeddings with
        them (DeBERTa's shared attention key); None where no layer gives one.
        """
        return None

    def value_terms(
        self, weights: torch.Tensor, q_positions: torch.Tensor, k_positions: torch.Tensor
    ) -> torch.Tensor | None:
        """Output terms ``[b, h, i, d]`` from the attention weights ``[b, h, i, j]`` (softmax of the
        scores), added to weights·V: Shaw et al.'s relative values; None here."""
        return None

    def block_terms(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        *,
        project: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
        content: tuple[torch.Tensor, torch.Tensor] | None = None,
    ):
        """What ``bias``, ``score_terms`` and ``content_terms`` add to the scores, as a function of one block
        of queries (:class:`posenc.kernels.query_blocked.BlockTerms`), so that attention never holds them for
        every pair at once; None (the default) where the encoding gives no such form: attention then reads
        the terms whole. ``content``: what :meth:`content` read of the queries ``[b, i, c]`` and keys
        ``[b, j, c]``, for an encoding that reads the content (None otherwise); ``project`` as for
        :meth:`score_terms`."""
        return None

    def content(self, x: torch.Tensor) -> torch.Tensor | None:
        """What the encoding reads from each token's layer input x ``[b, s, d_model]`` (the attention
        layer's input, after its norm), ``[b, s, c]``: FoX's log forget gates, PaTH's Householder vectors
        and strengths; None here. A KV cache keeps it with each key, so decoding reads the content of the
        earlier tokens as the full forward does (:meth:`content_terms` gets the queries' and the keys')."""
        return None

    def content_terms(
        self, q: torch.Tensor, k: torch.Tensor, q_content: torch.Tensor, k_content: torch.Tensor
    ) -> torch.Tensor | None:
        """Logit terms ``[b, h, i, j]`` that read what :meth:`content` gave for the queries ``[b, i, c]``
        and the keys ``[b, j, c]`` (the queries are the last i of the keys), and q ``[b, h, i, d]`` and k
        ``[b, h_kv, j, d]``; added to q·kᵀ·scale with the bias and score terms; None here."""
        return None

    def output_terms(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
    ) -> torch.Tensor | None:
        """Terms ``[b, h, i, d]`` added to attention's output, read from q ``[b, h, i, d]``, k and v
        ``[b, h_kv, j, d]`` (the queries are the last i of the keys): what a scheme whose weights are not a
        softmax adds to the softmax of its log-weights (stick-breaking's stick left over); None here."""
        return None

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        return self.embed(x, positions)
