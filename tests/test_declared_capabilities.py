"""What posenc does with an encoding follows from what the encoding declares: outside ``encodings/`` (and
``integrations/``, which maps posenc's encodings onto other libraries' models), no module probes an
encoding's attributes with getattr/hasattr, reads an attribute only some encodings hold, or branches on a
registered encoding's name. A scan of the source, so a new probe fails here rather than in review."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from torch import nn

import posenc
from posenc.analysis import specimen
from posenc.encodings import PositionalEncoding

SOURCE = Path(posenc.__file__).parent
#: Where an encoding's own knowledge of itself lives (``integrations/``: the table from posenc's encodings
#: to transformers' models is about particular encodings by construction).
OWN = ("encodings", "integrations")
#: Names a module gives an encoding (or its class) it did not build itself, or calls that return one.
ENCODING_NAMES = re.compile(r"^(encoding|enc|e|cls|klass|specimen|build|encoding_class)$")
#: Modules (or folders) that may name registered encodings, and why: forms of particular encodings that are
#: not posenc's encoding on a backend (a naive or materialised form reads its encoding's internals by
#: construction), and the GPU bench of the two in-kernel biases it times.
NAMED_FOLDERS = {
    "bench/peers.py": "the attention bench's declared naive and materialised forms of particular encodings",
    "bench/attention_cuda.py": "the GPU bench of ALiBi's and T5's flex_attention score_mod",
    "bench/layer.py": "one layer per named encoding, each set up as it is measured (Swin's grid and window)",
}
#: Tables keyed by names that are registered encodings' names too, and why they are data, not dispatch.
NAMED_DATA = {
    "BENCHES": "benchmarks are called after what they time (posenc bench rope), not after an encoding",
    "CONSUMERS": "apply_rope's backends: 'rope' names the function that takes them",
    "ALIASES": "apply_rope's backends: 'rope' names the function that takes them",
    "PUBLISHED_MRR": "numbers a paper published for the encodings it compared, keyed by their names here",
}
#: Attributes every encoding declares (the base class's) or any nn.Module has: reading them is no probe.
DECLARED = set(dir(PositionalEncoding)) | set(dir(nn.Module))


@functools.cache
def _modules() -> list[tuple[str, ast.Module]]:
    """(path under src/posenc, parsed module) of every module outside the encodings' own folders."""
    paths = sorted(path for path in SOURCE.rglob("*.py") if path.relative_to(SOURCE).parts[0] not in OWN)
    return [(path.relative_to(SOURCE).as_posix(), ast.parse(path.read_text("utf-8"))) for path in paths]


@functools.cache
def _particular_attributes() -> frozenset[str]:
    """Attributes some registered encoding holds that the base class does not declare (RoPE's
    ``rotary_dim``, T5's ``num_buckets``, a learned ``table`` …)."""
    names: set[str] = set()
    for name in posenc.available():
        encoding = specimen(name)
        names |= set(vars(encoding)) | set(encoding._parameters) | set(encoding._buffers)
        names |= set(encoding._modules) | set(dir(type(encoding)))
    return frozenset(name for name in names - DECLARED if not name.startswith("_"))


def _subject(node: ast.expr) -> str:
    """The name a getattr/hasattr reads from: ``encoding`` in ``getattr(encoding, …)`` or
    ``getattr(self.encoding, …)``, the called function in ``getattr(specimen(name), …)``."""
    while isinstance(node, ast.Call | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def test_no_module_outside_the_encodings_probes_an_encoding_with_getattr_or_hasattr():
    particular = _particular_attributes()
    probes = []
    for path, module in _modules():
        for node in ast.walk(module):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id not in ("getattr", "hasattr") or not node.args:
                continue
            attribute = node.args[1] if len(node.args) > 1 else None
            name = attribute.value if isinstance(attribute, ast.Constant) else None
            if ENCODING_NAMES.search(_subject(node.args[0])) or name in particular:
                probes.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    assert probes == [], "declare a view on PositionalEncoding instead of probing:\n" + "\n".join(probes)


def test_no_module_outside_the_encodings_reads_an_attribute_only_some_encodings_hold():
    particular = _particular_attributes()
    reads = []
    for path, module in _modules():
        if path.startswith(tuple(NAMED_FOLDERS)):
            continue
        for node in ast.walk(module):
            if isinstance(node, ast.Attribute) and node.attr in particular:
                if ENCODING_NAMES.search(_subject(node.value)):
                    reads.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    assert reads == [], "read a declared view instead:\n" + "\n".join(reads)


def _names_in(node: ast.expr, registered: set[str]) -> list[str]:
    return [
        child.value
        for child in ast.walk(node)
        if isinstance(child, ast.Constant) and isinstance(child.value, str) and child.value in registered
    ]


def _assigned(node: ast.AST) -> list[str]:
    """The names an assignment statement binds (none for any other node)."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    else:
        return []
    return [target.id for target in targets if isinstance(target, ast.Name)]


def _named_data(module: ast.Module) -> set[int]:
    """ids of the nodes inside the tables of :data:`NAMED_DATA` that ``module`` assigns."""
    inside: set[int] = set()
    for node in ast.walk(module):
        if set(_assigned(node)) & set(NAMED_DATA) and node.value is not None:
            inside |= {id(child) for child in ast.walk(node.value)}
    return inside


def test_no_module_outside_the_encodings_branches_on_a_registered_encoding_name():
    # a comparison, a table's key or a match case dispatches on a name; a list of names (a lab preset's
    # encodings, a default argument) is data and is not looked at
    registered = set(posenc.available())
    branches = []
    for path, module in _modules():
        if path.startswith(tuple(NAMED_FOLDERS)):
            continue
        allowed = _named_data(module)
        for node in ast.walk(module):
            if id(node) in allowed:
                continue
            if isinstance(node, ast.Compare):  # == "rope", in ("rope", …), != "t5"
                named = _names_in(node, registered)
            elif isinstance(node, ast.Dict):  # a table keyed by encoding names
                named = [name for key in node.keys if key is not None for name in _names_in(key, registered)]
            elif isinstance(node, ast.MatchValue):  # case "rope":
                named = _names_in(node.value, registered)
            else:
                continue
            if named:
                branches.append(f"{path}:{node.lineno}: {', '.join(named)}")
    assert branches == [], "declare it on the encoding's class instead:\n" + "\n".join(branches)


def test_every_module_and_table_allowed_to_name_encodings_still_exists():
    modules = dict(_modules())
    for folder in NAMED_FOLDERS:
        assert any(path.startswith(folder) for path in modules), (
            f"{folder} is gone: drop it from NAMED_FOLDERS"
        )
    assigned = {name for module in modules.values() for node in ast.walk(module) for name in _assigned(node)}
    assert set(NAMED_DATA) <= assigned, "drop the tables that are gone from NAMED_DATA"
