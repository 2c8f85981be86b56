"""What attention costs each encoding on CPU: the flash path and one layer's training, as ratios.

Two measurements, each in alternating rounds in one process (:func:`posenc.bench.harness.time_alternating`),
with glibc's mmap and trim thresholds raised as in the RoPE benchmark:

- :func:`flash_path`: ``MultiHeadAttention.attend`` for encodings that add nothing to the scores (NoPE,
  RoPE: rotation happens before ``attend``), causal, b=1, h=8, d_head=64, float32, against
  ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` and against what posenc passed before
  (the same call with the causal mask as a float ``attn_mask``), inference (``torch.no_grad``) and
  forward + backward (gradients of q, k, v), for each sequence length.
- :func:`layer_costs`: one ``MultiHeadAttention`` layer (backend ``"sdpa"``, causal, projections
  included), b=4, s=512, d_model=256, 8 heads, per encoding, inference and forward + backward (the
  gradient of the input and of every parameter), against NoPE's layer and against a plain layer of the
  same projections around ``is_causal`` SDPA (which reads no posenc code, so runs of different versions
  compare). Swin v2 reads the 2-D coordinates of a 16 × 32 grid (its window 16).

Before timing, every candidate's output is checked: the flash path against float64 to 1e-5, each
layer against the same layer on the eager backend to 1e-4 (outputs and input gradients).

Run: ``python -m posenc.bench.layer [--json PATH] [--rounds N] [--seq-lens 512,…] [--only REGEX]
[--threads N]``. The file runs as a script too, so the same measurement can be taken of another
checkout (``PYTHONPATH=other/src python src/posenc/bench/layer.py``): the plain layer reads no posenc
code, so ``× plain`` compares versions.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import sys
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from posenc.bench.harness import time_alternating

SEQ_LENS: tuple[int, ...] = (512, 1024, 2048, 4096, 8192)
HEADS, D_HEAD = 8, 64
LAYER = {"batch": 4, "seq_len": 512, "d_model": 256, "heads": 8}
#: The encodings timed as one layer; the first is the denominator of ``× NoPE``.
LAYER_ENCODINGS: tuple[str, ...] = ("nope", "rope", "alibi", "sandwich", "t5", "kerple", "swin", "swin_v2")
PLAIN = "plain layer, is_causal SDPA"
SWIN_GRID = (16, 32)


def _steady_malloc() -> None:
    from posenc.bench.rope import steady_malloc

    steady_malloc()


def flash_path(seq_lens: Sequence[int] = SEQ_LENS, rounds: int = 7) -> list[dict]:
    """Per length: inference and forward + backward of NoPE's and RoPE's ``attend`` against is_causal SDPA."""
    from posenc.attention import MultiHeadAttention
    from posenc.encodings import build

    cases = []
    for seq_len in seq_lens:
        generator = torch.Generator().manual_seed(seq_len)
        q, k, v = (torch.randn(1, HEADS, seq_len, D_HEAD, generator=generator) for _ in range(3))
        grad = torch.randn(1, HEADS, seq_len, D_HEAD, generator=generator)
        layers = {
            name: MultiHeadAttention(HEADS * D_HEAD, HEADS, encoding=build(name, **arguments))
            for name, arguments in (("nope", {}), ("rope", {"d_head": D_HEAD}))
        }

        def float_mask(q, k, v):  # what posenc passed before: the causal mask as a float attn_mask
            causal = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
            mask = torch.zeros(causal.shape, dtype=q.dtype).masked_fill(~causal, float("-inf"))
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

        calls: dict[str, Callable] = {
            "SDPA is_causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            "SDPA + float causal mask (posenc before)": float_mask,
            **{f"posenc {name} attend": _attend(layer) for name, layer in layers.items()},
        }
        expected = _float64_causal(q, k, v)
        for name, call in calls.items():
            with torch.no_grad():
                error = float((call(q, k, v).double() - expected).abs().max())
            if not error <= 1e-5:
                raise AssertionError(f"{name} is {error:.3g} from float64 at s={seq_len}")
        timed = {}
        for name, call in calls.items():
            timed[f"{name} | inference"] = _inference(call, q, k, v)
            timed[f"{name} | forward + backward"] = _training(call, q, k, v, grad)
        cases.append(
            {"seq_len": seq_len, "timings": _ratios(time_alternating(timed, rounds=rounds, warmup=1))}
        )
    return cases


def _attend(layer) -> Callable:
    return lambda q, k, v: layer.attend(q, k, v, None, None)


def _float64_causal(q, k, v) -> torch.Tensor:
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    hidden = torch.ones(scores.shape[-2:], dtype=torch.bool).tril().logical_not()
    return scores.masked_fill(hidden, float("-inf")).softmax(dim=-1) @ v.double()


def _inference(call, *inputs) -> Callable[[], None]:
    def run():
        with torch.no_grad():
            call(*inputs)

    return run


def _training(call, q, k, v, grad) -> Callable[[], None]:
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]

    def run():
        for leaf in leaves:
            leaf.grad = None
        call(*leaves).backward(grad)

    return run


def _ratios(timings: dict) -> list[dict]:
    """Each timing with its ratio to the first candidate of its mode (``| inference`` / ``| forward …``)."""
    rows, floors = [], {}
    for key, timing in timings.items():
        name, mode = key.split(" | ")
        floor = floors.setdefault(mode, timing.median_ms)
        rows.append({**timing.as_dict(), "name": name, "mode": mode, "ratio": timing.median_ms / floor})
    return rows


def layer_costs(encodings: Sequence[str] = LAYER_ENCODINGS, rounds: int = 11) -> list[dict]:
    """One layer's inference and forward + backward per encoding, against NoPE and a plain layer."""
    from posenc.attention import MultiHeadAttention
    from posenc.encodings import build, encoding_class
    from posenc.functional import grid_positions

    b, s, d_model, h = (LAYER[key] for key in ("batch", "seq_len", "d_model", "heads"))
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(b, s, d_model, generator=generator)
    grad = torch.randn(b, s, d_model, generator=generator)
    runs: dict[str, tuple[Callable, tuple]] = {PLAIN: (_plain_layer(d_model, h), (None,))}
    for name in encodings:
        torch.manual_seed(0)
        if name in ("swin", "swin_v2"):
            window = SWIN_GRID[0]
            encoding = build(name, n_heads=h, window=window if name == "swin_v2" else SWIN_GRID)
            positions = grid_positions(SWIN_GRID) if name == "swin_v2" else torch.arange(s)
        else:
            arguments = encoding_class(name).model_arguments(
                d_model=d_model, n_heads=h, max_len=s, causal=True
            )
            encoding, positions = build(name, **arguments), None
        layer = MultiHeadAttention(d_model, h, encoding=encoding, backend="sdpa")
        _check_layer(name, layer, x, positions)
        runs[name] = (layer, (positions,))
    timed = {}
    for name, (layer, arguments) in runs.items():
        timed[f"{name} | inference"] = _inference(layer, x, *arguments)
        timed[f"{name} | forward + backward"] = _layer_training(layer, x, grad, arguments)
    timings = time_alternating(timed, rounds=rounds, warmup=1)
    nope = {mode: timings[f"nope | {mode}"].median_ms for mode in ("inference", "forward + backward")}
    plain = {mode: timings[f"{PLAIN} | {mode}"].median_ms for mode in nope}
    rows = []
    for key, timing in timings.items():
        name, mode = key.split(" | ")
        rows.append(
            {
                **timing.as_dict(),
                "name": name,
                "mode": mode,
                "of_nope": timing.median_ms / nope[mode],
                "of_plain": timing.median_ms / plain[mode],
            }
        )
    return rows


def _plain_layer(d_model: int, heads: int) -> torch.nn.Module:
    """The same projections around ``F.scaled_dot_product_attention(…, is_causal=True)``, no posenc code."""

    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (torch.nn.Linear(d_model, d_model, bias=False) for _ in range(4))

        def forward(self, x, positions=None):
            b, s, _ = x.shape
            q, k, v = (
                p(x).view(b, s, heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v)
            )  # [b, h, s, d]
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o(out.transpose(1, 2).reshape(b, s, d_model))

    torch.manual_seed(0)
    return Plain()


def _check_layer(name: str, layer, x: torch.Tensor, positions) -> None:
    """The layer on sdpa against itself on eager: outputs and the input's gradient within 1e-4."""
    results = []
    for backend in ("sdpa", "eager"):
        layer.backend = backend
        leaf = x[:1].detach().clone().requires_grad_()
        out = layer(leaf, positions)
        out.square().mean().backward()
        results.append((out.detach(), leaf.grad))
        layer.zero_grad()
    layer.backend = "sdpa"
    error = max(float((a - b).abs().max()) for a, b in zip(*results, strict=True))
    if not error <= 1e-4:
        raise AssertionError(f"{name}: sdpa is {error:.3g} from eager")


def _layer_training(layer, x, grad, arguments) -> Callable[[], None]:
    leaf = x.detach().clone().requires_grad_()

    def run():
        leaf.grad = None
        layer.zero_grad(set_to_none=True)
        layer(leaf, *arguments).backward(grad)

    return run


def run(seq_lens: Sequence[int] = SEQ_LENS, rounds: int = 7, only: str | None = None) -> dict:
    """Both measurements, JSON-ready; ``only``: a regular expression of the parts to run
    (``flash``, ``layer``)."""
    _steady_malloc()
    wanted = re.compile(only or ".")
    result = {
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "rounds": rounds,
        "layer": LAYER,
    }
    if wanted.search("flash"):
        result["flash_path"] = flash_path(seq_lens, rounds)
    if wanted.search("layer"):
        result["layer_costs"] = layer_costs(rounds=max(rounds, 11))
    return result


def print_tables(result: dict) -> None:
    """Markdown tables of :func:`run`'s result."""
    for case in result.get("flash_path", []):
        print(f"\nflash path, s = {case['seq_len']} (× the first row of each mode, SDPA is_causal):\n")
        print("| candidate | mode | median ms | range ms | × SDPA is_causal |\n|---|---|---:|---:|---:|")
        for row in case["timings"]:
            print(
                f"| {row['name']} | {row['mode']} | {row['median_ms']:.2f} | "
                f"{row['min_ms']:.2f}–{row['max_ms']:.2f} | {row['ratio']:.3f} |"
            )
    if "layer_costs" in result:
        print("\none layer, b4 s512 d256 h8:\n")
        print("| encoding | mode | median ms | range ms | × NoPE | × plain |\n|---|---|---:|---:|---:|---:|")
        for row in result["layer_costs"]:
            print(
                f"| {row['name']} | {row['mode']} | {row['median_ms']:.2f} | {row['min_ms']:.2f}–"
                f"{row['max_ms']:.2f} | {row['of_nope']:.2f} | {row['of_plain']:.2f} |"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m posenc.bench.layer", description=__doc__.splitlines()[0])
    parser.add_argument("--seq-lens", default=",".join(map(str, SEQ_LENS)), help="flash path lengths")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (the layer: at least 11)")
    parser.add_argument("--only", default=None, help="regular expression of the parts: flash, layer")
    parser.add_argument("--json", default=None, help="also write the result here")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    result = run([int(n) for n in args.seq_lens.split(",")], args.rounds, args.only)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(result, file, indent=1)
    print_tables(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
