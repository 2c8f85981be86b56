"""``posenc list``: the registered encodings as the README's table (encoding, kind, where it acts,
parameters, used by), in the terminal, as Markdown or as JSON.

Kind and parameters are the encoding's own ``kind`` and ``parameter_formula``. Where it acts and who
uses it are an encoding's ``where_it_acts`` and ``used_by`` where it declares them, else those of
:data:`CATALOGUE` for the encodings posenc ships; an encoding in neither gets its kind's place
(:data:`PLACES`) and "not declared", so a new one needs no line here.
"""

from __future__ import annotations

import argparse
import json

from posenc.cli.output import print_table
from posenc.table import Table, to_markdown

COLUMNS = ("encoding", "kind", "where it acts", "parameters", "used by")
TITLE = "posenc encodings   (L = max_len, d = d_model, h = n_heads)"
#: Where an encoding of each kind acts, for one that says no more.
PLACES = {
    "additive": "added to the token embeddings",
    "rotary": "rotates queries and keys",
    "bias": "biases the attention scores",
    "none": "nowhere",
}
#: name -> (where it acts, used by) of the encodings posenc ships.
CATALOGUE = {
    "sinusoidal": ("added to (or concatenated with) the token embeddings", "the original Transformer"),
    "learned": ("added to (or concatenated with) the token embeddings", "BERT, GPT-2"),
    "rope": ("rotates queries and keys", "LLaMA, GPT-NeoX, GPT-J, Phi-3"),
    "alibi": ("adds −m_h·(i − j) to attention scores", "BLOOM, MPT"),
    "t5": ("adds a learned bucketed relative bias to scores", "T5"),
    "swin": ("adds a learned 2-D window bias to scores", "Swin Transformer"),
    "nope": ("nowhere: the control", "—"),
    "sinusoidal_2d": (
        "2-D sin-cos codes of image patches, added to their embeddings",
        "MAE, DiT (diffusers)",
    ),
    "rope_axial": ("rotates q and k, each coordinate axis its own channels", "Flux, RoPE-ViT, EVA-02"),
    "mrope": (
        "rotates q and k, one spectrum split into (t, h, w) sections",
        "Qwen2-VL, Qwen2.5-VL, Qwen3-VL",
    ),
    "rope_mixed": ("rotates q and k by learned per-head directions over the axes", "RoPE-ViT (RoPE-Mixed)"),
    "swin_v2": ("adds 16·sigmoid(MLP(log-spaced 2-D offset)) to scores", "Swin v2, timm's RelPosMlp"),
    "shaw": (
        "reads q: q·a^K of the clipped distance; optionally relative values",
        "Shaw et al., BERT's relative_key",
    ),
    "transformer_xl": (
        "reads q and k: (q + v)·W R_{i−j} + u·k_j over a sinusoidal relative matrix",
        "Transformer-XL",
    ),
    "deberta": (
        "reads q and k: content-to-position and position-to-content terms, log buckets",
        "DeBERTa v1–v3",
    ),
    "cope": ("reads q and k: q·e(p) at positions counted by gates σ(q·k)", "CoPE"),
    "fire": ("adds a learned MLP of the progressively interpolated log distance", "FIRE"),
    "kerple": ("adds −r1·log(1 + r2·|i − j|) or −r1·|i − j|^r2, learned per head", "KERPLE"),
    "sandwich": ("adds the dot product of two sinusoidal codes, per-head scaled", "Sandwich"),
}
NOT_DECLARED = "not declared"


def configure(subparsers) -> None:
    """Add the ``list`` parser."""
    parser = subparsers.add_parser(
        "list", help="registered encodings: kind, where each acts, parameters, who uses it"
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--json", action="store_true", help="print JSON (with each summary) instead of a table"
    )
    output.add_argument("--markdown", action="store_true", help="print the table as Markdown (the README's)")


def summary(doc: str | None) -> str:
    """The first paragraph of a docstring on one line: a summary line that wraps is read whole."""
    paragraph = (doc or "").strip().split("\n\n", 1)[0]
    return " ".join(paragraph.split())


def rows() -> list[dict]:
    """One dict per registered encoding: name, kind, where it acts, parameter formula, used by, summary."""
    from posenc.encodings import ENCODINGS, available

    listed = []
    for name in available():
        cls = ENCODINGS[name]
        where, used_by = CATALOGUE.get(name, (PLACES.get(cls.kind, NOT_DECLARED), NOT_DECLARED))
        listed.append(
            {
                "name": name,
                "kind": cls.kind,
                "where": getattr(cls, "where_it_acts", None) or where,
                "parameters": cls.parameter_formula,
                "used_by": getattr(cls, "used_by", None) or used_by,
                "summary": summary(cls.__doc__),
            }
        )
    return listed


def table(encodings: list[dict]) -> Table:
    """The README's table of ``encodings`` (dicts of :func:`rows`)."""
    keys = ("name", "kind", "where", "parameters", "used_by")
    cells = [[NOT_DECLARED if row[key] is None else str(row[key]) for key in keys] for row in encodings]
    return Table(COLUMNS, cells, title=TITLE)


def run(args: argparse.Namespace) -> int:
    """Print the encodings as a table, as Markdown with ``--markdown``, or as JSON with ``--json``."""
    encodings = rows()
    if args.json:
        print(json.dumps(encodings, indent=2, ensure_ascii=False))
    elif args.markdown:
        print(to_markdown(table(encodings)))
    else:
        print_table(table(encodings))
    return 0
