"""Learned rotations of queries and keys: skew-symmetric generators, their Cayley transforms and exponentials,
rotations applied block by block, and the angles of pairs turning along directions in coordinate space.

Shared by the encodings whose rotation is learned or not a plain RoPE table (STRING, LieRE, ComRoPE,
Golden Gate RoPE, Mochi). Everything is computed in float64 from the parameters (whatever their dtype) and
cast once to the input's dtype.
"""

from __future__ import annotations

import math

import torch

from posenc._validation import check_positive_int


def skew_symmetric(upper: torch.Tensor, size: int) -> torch.Tensor:
    """The skew-symmetric matrices ``[..., size, size]`` whose strict upper triangles are ``upper``
    ``[..., size·(size − 1)/2]`` (row by row): A = U − Uᵀ.

    Raises:
        ValueError: ``upper`` whose last axis does not hold size·(size − 1)/2 values.
    """
    size = check_positive_int("size", size)
    count = size * (size - 1) // 2
    if upper.shape[-1] != count:
        raise ValueError(
            f"a {size}×{size} skew-symmetric matrix has {count} free entries, got upper of shape "
            f"{tuple(upper.shape)}"
        )
    rows, cols = torch.triu_indices(size, size, offset=1, device=upper.device)
    matrix = upper.new_zeros((*upper.shape[:-1], size, size))
    matrix[..., rows, cols] = upper
    return matrix - matrix.transpose(-1, -2)


def cayley(skew: torch.Tensor) -> torch.Tensor:
    """The Cayley transform P = (I − S)(I + S)⁻¹ of skew-symmetric S ``[..., d, d]``: an orthogonal matrix
    with determinant 1 (I + S is invertible for every real skew S: its eigenvalues are 1 + iλ)."""
    eye = torch.eye(skew.shape[-1], dtype=skew.dtype, device=skew.device)
    # solved, not inverted: X·(I + S) = I − S
    return torch.linalg.solve(eye + skew, eye - skew, left=False)


def block_rotate(x: torch.Tensor, rotation: torch.Tensor) -> torch.Tensor:
    """x ``[b, h, s, d]`` with each block of B consecutive channels multiplied by its matrix.

    Args:
        x: ``[b, h, s, d]``, d = n_blocks·B.
        rotation: ``[b or 1, h or 1, s, n_blocks, B, B]`` (any float dtype; cast to x's).

    Returns:
        ``[b, h, s, d]``: block c of channels becomes rotation[..., c, :, :] @ x_c.
    """
    blocks, size = rotation.shape[-3], rotation.shape[-1]
    grouped = x.unflatten(-1, (blocks, size)).unsqueeze(-2)  # [b, h, s, n_blocks, 1, B]
    turned = (rotation.to(x.dtype) * grouped).sum(-1)  # [b, h, s, n_blocks, B]: broadcast over b and h
    return turned.flatten(-2)


def coordinate_exponential(positions: torch.Tensor, generators: torch.Tensor) -> torch.Tensor:
    """exp(Σ_a x_a·G_a) per token and block, float64 ``[b or 1, 1, s, n_blocks, B, B]`` (one map for every
    head), for coordinates x ``[s, n]`` or ``[b, s, n]`` and generators G ``[n, n_blocks, B, B]``.

    Skew-symmetric generators give rotations; where they commute (one axis, or ComRoPE's), the map of a
    sum of coordinates is the product of the maps, so R(x)ᵀ·R(y) = R(y − x).
    """
    coordinates = positions.to(torch.float64)
    if coordinates.dim() == 2:
        coordinates = coordinates[None]  # [1, s, n]
    generator = torch.einsum("bsn,ncij->bscij", coordinates, generators.to(torch.float64))
    return torch.linalg.matrix_exp(generator).unsqueeze(1)  # [b or 1, 1, s, n_blocks, B, B]


def directional_angles(positions: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """The angles Σ_a x_a·W[h, k, a] of pair k of head h at coordinates x, float64 ``[b or 1, h, s, K]``.

    Args:
        positions: ``[s, n]`` or ``[b, s, n]`` coordinates (integer or float; used as float64).
        directions: ``[h, K, n]``: each pair's frequency vector (direction times angular frequency).

    The product is taken in float64 (differentiable in W): an absolute error near |angle|·2^−53.
    """
    coordinates = positions.to(torch.float64)
    if coordinates.dim() == 2:
        coordinates = coordinates[None]  # [1, s, n]
    return torch.einsum("bsn,hkn->bhsk", coordinates, directions.to(torch.float64))


def golden_directions(count: int, axes: int) -> torch.Tensor:
    """``count`` unit vectors of R^n spread evenly over the sphere, float64 ``[count, n]``, from the
    generalised golden ratio (Roberts, 2018, "The unreasonable effectiveness of quasirandom sequences").

    φ_n is the positive root of x^(n+1) = x + 1 (the golden ratio for n = 1); point j = 1, 2, … of the
    sequence is z_j = frac(j·α) with α_a = φ_n^(−a), a = 1 … n, a low-discrepancy point of [0, 1)^n. Its
    Gaussian quantiles erfinv(2z − 1) point in a direction spread evenly over the sphere, normalised.
    """
    count = check_positive_int("count", count)
    axes = check_positive_int("axes", axes)
    phi = 2.0
    for _ in range(64):  # the fixed point of x = (1 + x)^(1/(n+1)), a contraction near φ_n
        phi = (1.0 + phi) ** (1.0 / (axes + 1))
    alpha = phi ** -torch.arange(1, axes + 1, dtype=torch.float64)  # [n]
    index = torch.arange(1, count + 1, dtype=torch.float64)[:, None]  # [count, 1]
    z = torch.remainder(index * alpha, 1.0)  # [count, n]
    gaussian = torch.erfinv(2.0 * z - 1.0)
    return gaussian / gaussian.norm(dim=-1, keepdim=True)


def log_spaced(count: int, smallest: float, largest: float) -> torch.Tensor:
    """``count`` frequencies from ``smallest`` to ``largest``, evenly spaced in log, float64 ``[count]``."""
    if count == 1:
        return torch.tensor([largest], dtype=torch.float64)
    steps = torch.arange(count, dtype=torch.float64) / (count - 1)
    return torch.exp(math.log(smallest) + steps * (math.log(largest) - math.log(smallest)))


__all__ = [
    "block_rotate",
    "cayley",
    "directional_angles",
    "golden_directions",
    "log_spaced",
    "skew_symmetric",
]
