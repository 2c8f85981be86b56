"""Does torch's compiled flex_attention agree with plain attention on CPU?  (pure torch, no posenc)

torch 2.13's compiled ``flex_attention`` on CPU has been seen to return wrong values or NaN at some
lengths and head widths, intermittently (e.g. 24 tokens, head width 8: NaN; a 1-layer model on 24
tokens: 2 of 4 runs off by up to 1.5). posenc's flex backend therefore evaluates score_mods on index
grids on CPU (``posenc.attention``). Run this on a new torch release, several times and under load:
when it reports no disagreement, the CPU workaround can be dropped.

    python tools/flex_cpu_check.py [--runs 4] [--lengths 8,16,24,…] [--widths 8,16,32]

Prints each disagreement and how many shapes ran the compiled kernel; exits 1 if there was a
disagreement or a shape did not run compiled, 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def plain_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q·kᵀ/√d + causal mask)·v in float64, the reference."""
    s, d = q.shape[-2], q.shape[-1]
    scores = (q.double() @ k.double().transpose(-1, -2)) / d**0.5  # [b, h, s, s]
    scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    return (scores.softmax(-1) @ v.double()).float()


def check(lengths: list[int], widths: list[int], runs: int, heads: int = 4) -> tuple[list[str], int]:
    """Disagreements of the compiled kernel with the float64 reference, and the shapes compiled.

    Each shape gets its own compilation (dynamo reset first, fullgraph): one compiled function
    reused across shapes would pass dynamo's recompile limit after 8 of them and fall back to
    eager flex_attention, so later shapes would not test the compiled kernel at all.
    """
    problems, compiled_shapes = [], 0
    for seq_len in lengths:
        mask = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, seq_len, seq_len, device="cpu")
        for width in widths:
            torch._dynamo.reset()
            counter = CompileCounterWithBackend("inductor")
            compiled = torch.compile(flex_attention, backend=counter, dynamic=False, fullgraph=True)
            for run in range(runs):
                generator = torch.Generator().manual_seed(1000 * seq_len + 10 * width + run)
                q, k, v = (torch.randn(1, heads, seq_len, width, generator=generator) for _ in range(3))
                got = compiled(q, k, v, block_mask=mask)
                error = float((got - plain_causal_attention(q, k, v)).abs().max())
                if not error <= 1e-4:  # NaN fails too
                    problems.append(f"s={seq_len} d={width} run {run}: max |error| {error:.3g}")
            compiled_shapes += counter.frame_count == 1  # one inductor graph served every run
    return problems, compiled_shapes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=_ints, default=[8, 16, 24, 31, 32, 48, 64, 100, 128, 130])
    parser.add_argument("--widths", type=_ints, default=[8, 16, 32, 64])
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args(argv)
    problems, compiled_shapes = check(args.lengths, args.widths, args.runs)
    shapes = len(args.lengths) * len(args.widths)
    print(
        f"torch {torch.__version__}: {len(problems)} disagreement(s) with plain attention "
        f"({compiled_shapes} of {shapes} shapes ran the compiled kernel)"
    )
    for line in problems:
        print("  " + line)
    return 1 if problems or compiled_shapes < shapes else 0


if __name__ == "__main__":
    sys.exit(main())
