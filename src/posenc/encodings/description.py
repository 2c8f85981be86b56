"""What posenc says about an encoding, apart from how it acts: a :class:`Description` given to ``register``.

The module (:class:`~posenc.encodings.base.PositionalEncoding`) keeps the attention contract: its hooks,
views and capabilities. Its name in figure titles, its row of seed 004's comparison table, its figures
and their captions, the representative instance analysis shows, the lab tasks it does not apply to and
its cells of ``posenc list`` are a description of it, which the gallery, the analysis, the report, the
lab and the CLI read through :func:`posenc.encodings.describe`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from posenc.functional.normalized import NormalizedCoordinates

#: The model the specimen of an encoding is built for when it declares no ``specimen_kwargs``.
SPECIMEN_MODEL = {"d_model": 64, "n_heads": 8, "max_len": 256, "causal": True}
#: Where an encoding of each kind acts, for one that declares no ``where_it_acts``.
PLACES = {
    "additive": "added to the token embeddings",
    "rotary": "rotates queries and keys",
    "bias": "biases the attention scores",
    "none": "nowhere",
}
NOT_DECLARED = "not declared"


@dataclass(frozen=True)
class SeedRow:
    """An encoding's row of seed 004's comparison table (§7), verbatim: what the seed claims."""

    order: int  # the row's place in the seed's table (1 = first)
    method: str  # the "Method" cell
    parameters: str  # the "Parameters" cell, e.g. "L × d"
    length_generalization: str  # Poor | Moderate | Good | Excellent
    relative_position: str  # No | Implicit | Explicit


@dataclass(frozen=True)
class Description:
    """What posenc says about a registered encoding; every field has the default of an encoding that
    declares nothing, for which analysis, figures and the report fall back on its kind and views.

    Fields:
        label: the name in figure titles (None: the registered name).
        where_it_acts, used_by: its cells of ``posenc list`` (the README's table); where_it_acts None:
            its kind's place (:data:`PLACES`), filled in at registration.
        parameter_formula: the number of learned parameters as a formula of L (``max_len``),
            d (``d_model``) and h (``n_heads``), e.g. ``"L·d"``; None: not declared (the parameter
            claim is then not applicable, and only the count is shown).
        seed_row: the encoding's row of seed 004's table, or None.
        fixed_buffers: names of the buffers that hold fixed constants of the encoding (ALiBi's slopes),
            counted as such by the lab, never as learned parameters.
        specimen_kwargs: constructor arguments of the instance analysis and figures show; None builds
            it for a small model (d_model 64, 8 heads, 256 positions) through ``model_arguments``.
        figures: figure kind -> caption (None: the gallery's caption) of the figures drawn of it; None
            draws the defaults of its kind that its ``views`` allow.
        lab_not_applicable: why the lab's 1-D tasks do not apply (None: they all do).
        grid_not_applicable: why the lab's grid task (2-D image patches) does not apply (None: it does;
            an encoding of one axis reads the patches' raster index).
        grid_coordinates: the coordinates it reads on a grid of patches: None, the integer indices
            (row, column) (the safe default: what axial RoPE, RoPE-Mixed, 2-D sin-cos, a learned table
            and Swin's biases index); a :class:`~posenc.functional.normalized.NormalizedCoordinates`,
            the grid normalised as its model does (DINOv3: cell centres in [−1, 1] per axis).
    """

    label: str | None = None
    where_it_acts: str | None = None
    used_by: str = NOT_DECLARED
    parameter_formula: str | None = None
    seed_row: SeedRow | None = None
    fixed_buffers: tuple[str, ...] = ()
    specimen_kwargs: Mapping[str, object] | None = None
    figures: Mapping[str, str | None] | None = None
    lab_not_applicable: str | None = None
    grid_not_applicable: str | None = None
    grid_coordinates: NormalizedCoordinates | None = None
    shared_by_layers: bool = True

    def of_kind(self, kind: str) -> Description:
        """This description with an undeclared ``where_it_acts`` filled in from ``kind``."""
        if self.where_it_acts is not None:
            return self
        return replace(self, where_it_acts=PLACES.get(kind, NOT_DECLARED))

    def specimen_arguments(self, cls: type) -> dict:
        """Constructor arguments of the representative instance of ``cls``: ``specimen_kwargs``, else
        its ``model_arguments`` for a small model (:data:`SPECIMEN_MODEL`)."""
        if self.specimen_kwargs is not None:
            return dict(self.specimen_kwargs)
        return cls.model_arguments(**SPECIMEN_MODEL)

    def lab_skip_reason(self, axes: int = 1) -> str | None:
        """Why the lab does not train the encoding on a task whose positions have ``axes`` axes (1: lm,
        copy, …; 2: the grid of image patches), or None when it does."""
        return self.lab_not_applicable if axes == 1 else self.grid_not_applicable


#: The fields of a :class:`Description`, which a class may still declare as class attributes.
FIELDS = tuple(field.name for field in fields(Description))


def declared_by(cls: type, described: Mapping[type, Description]) -> Description:
    """The description a class declares as class attributes of the fields' names (as plugins written
    before :class:`Description` do), each inherited as a class attribute would be: from the nearest
    class of its MRO that declares it, or that was registered with a description (``described``)."""
    values = {}
    for name in FIELDS:
        for klass in cls.__mro__:
            if name in vars(klass):
                values[name] = vars(klass)[name]
                break
            if klass in described:
                values[name] = getattr(described[klass], name)
                break
    return Description(**values).of_kind(cls.kind)
