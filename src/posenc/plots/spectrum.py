"""Frequency spectra: the sinusoidal wavelengths λ_i (seed 004 §2.3) and RoPE's inv_freq under each scaling."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from matplotlib.figure import Figure

from posenc.plots._common import as_array, check_nonempty, line_styles


def wavelength_spectrum(wavelengths: torch.Tensor | np.ndarray, *, title: str | None = None) -> Figure:
    """λ_i against the pair index i on a log axis: a straight line, since λ_i = 2π·base^(2i/d) is geometric.

    Args:
        wavelengths: ``[d/2]``, e.g. ``wavelengths(d_model, base)``.
        title: the axes title.

    Returns:
        The Figure; its line has ``gid="wavelengths"`` with x = pair index i, y = λ_i; the
        dashed line ``gid="two-pi"`` marks 2π, the shortest wavelength.
    """
    values = as_array(wavelengths, "wavelengths", dims=1)
    figure = Figure(figsize=(8, 4.5), layout="constrained")
    axes = figure.add_subplot()
    (line,) = axes.plot(np.arange(values.size), values, marker="o", markersize=3, label="λ_i")
    line.set_gid("wavelengths")
    guide = axes.axhline(2 * np.pi, linestyle="--", linewidth=1, color="grey", label="2π")
    guide.set_gid("two-pi")
    axes.set_yscale("log")
    axes.set_xlabel("pair index i   (dimensions 2i, 2i + 1)")
    axes.set_ylabel("wavelength λ_i (positions per turn)")
    axes.set_title("Wavelengths λ_i = 2π·base^(2i/d)" if title is None else title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small")
    return figure


def inv_freq_scalings(
    inv_freq: Mapping[str, torch.Tensor | np.ndarray], *, reference: str = "none", title: str | None = None
) -> Figure:
    """RoPE's θ_k per scaling on a log axis, and below it the divisor θ_k(reference) / θ_k(scaled).

    Args:
        inv_freq: ``{name: [r/2]}``, e.g. ``scaled_inv_freq(rotary_dim, base)``.
        reference: the key of the unscaled frequencies; the divisor panel is drawn only when present.
        title: the figure title.

    Returns:
        The Figure; line ``gid="inv-freq-{name}"`` holds x = k, y = θ_k of that scaling, line
        ``gid="divisor-{name}"`` x = k, y = θ_k(reference) / θ_k(name) for every other name; each
        scaling has a colour and line style of its own (there are more than 10). A scaling that sets
        some θ_k to 0 (proportional RoPE leaves those pairs unrotated) cannot show them on the log
        axes, where the divisor is infinite: the text ``gid="zero-frequencies"`` says which.

    Raises:
        ValueError: an empty mapping, or spectra of different lengths.
    """
    check_nonempty("inv_freq", inv_freq)
    spectra = {name: as_array(values, f"inv_freq[{name!r}]", dims=1) for name, values in inv_freq.items()}
    sizes = {values.size for values in spectra.values()}
    if len(sizes) != 1:
        raise ValueError(f"inv_freq spectra must all have the same length, got lengths {sorted(sizes)}")
    has_reference = reference in spectra
    figure = Figure(figsize=(9, 7 if has_reference else 4.5), layout="constrained")
    top, bottom = figure.subplots(2, 1, sharex=True) if has_reference else (figure.add_subplot(), None)
    pairs = np.arange(sizes.pop())
    styles = line_styles(spectra)
    for name, values in spectra.items():
        (line,) = top.plot(
            pairs, values, marker="o", markersize=2.5, linewidth=1.2, label=name, **styles[name]
        )
        line.set_gid(f"inv-freq-{name}")
        if bottom is not None and name != reference:
            with np.errstate(divide="ignore"):  # θ_k = 0: an infinite divisor, said in the note below
                divisor = spectra[reference] / values
            (ratio,) = bottom.plot(pairs, divisor, linewidth=1.5, label=name, **styles[name])
            ratio.set_gid(f"divisor-{name}")
    _note_zero_frequencies(figure, spectra, divisor=bottom is not None)
    top.set_yscale("log")
    top.set_ylabel("θ_k (radians per position)")
    top.grid(True, which="both", alpha=0.3)
    top.legend(title="scaling", fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    if bottom is None:
        top.set_xlabel("pair index k")
    else:
        bottom.set_yscale("log", base=2)
        bottom.set_xlabel("pair index k   (fast → slow)")
        bottom.set_ylabel(f"θ_k({reference}) / θ_k(scaled)")
        bottom.grid(True, which="both", alpha=0.3)
    figure.suptitle("RoPE inv_freq before and after each scaling" if title is None else title)
    return figure


def _note_zero_frequencies(figure: Figure, spectra: Mapping[str, np.ndarray], *, divisor: bool) -> None:
    """Say in the figure which scalings set θ_k = 0 and at which pairs: a log axis silently leaves those
    points out (and their divisor is infinite), so a line that stops short would otherwise look like
    missing data. The note goes below the panels: inside one, it ran across the lines."""
    lines = []
    for name, values in spectra.items():
        zeros = np.flatnonzero(values == 0)
        if zeros.size:
            where = f"k = {zeros[0]}…{zeros[-1]}" if np.all(np.diff(zeros) == 1) else f"{zeros.size} pairs"
            lines.append(
                f"{name}: θ_k = 0 at {where} ({zeros.size} of {values.size} pairs not rotated): not drawn "
                "on the log axes" + (", where their divisor is infinite" if divisor else "")
            )
    if lines:
        note = figure.supxlabel("\n".join(lines), fontsize="small")
        note.set_gid("zero-frequencies")
