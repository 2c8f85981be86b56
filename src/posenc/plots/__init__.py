"""Matplotlib figures drawn from analysis results; each function returns a Figure and never shows it."""

from posenc.plots.dot_product import flat_lines

__all__ = ["flat_lines"]
