"""Argument checks shared by the public API: each raises a ValueError or TypeError naming the value."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from numbers import Integral, Real

import torch


def check_int(name: str, value: object) -> int:
    """`value` as an int (a 0-d integer tensor counts); bools and floats (even 8.0) are refused."""
    if isinstance(value, torch.Tensor) and value.dim() == 0 and is_integer_dtype(value.dtype):
        return int(value)
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    return int(value)


def check_positive_int(name: str, value: object) -> int:
    value = check_int(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


def check_even_positive_int(name: str, value: object) -> int:
    value = check_positive_int(name, value)
    if value % 2:
        raise ValueError(f"{name} must be even, got {value}")
    return value


def check_positive_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be positive and finite, got {value}")
    return value


def check_nonnegative_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be non-negative and finite, got {value}")
    return value


def check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return value


def check_positive_floats(name: str, values: object, length: int, counted: str = "") -> tuple[float, ...]:
    """``length`` positive finite reals (a list, tuple or 1-d tensor); a string is refused.

    ``counted`` names what ``length`` is in the message (e.g. ``"rotary_dim/2"``).
    """
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TypeError(
            f"{name} must be a sequence of {length} numbers, got {values!r} ({type(values).__name__})"
        )
    values = list(values.tolist() if isinstance(values, torch.Tensor) else values)
    if len(values) != length:
        raise ValueError(
            f"{name} must hold {counted + ' = ' if counted else ''}{length} values, got {len(values)}"
        )
    for index, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, Real):
            raise TypeError(f"{name}[{index}] must be a real number, got {value!r} ({type(value).__name__})")
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name}[{index}] must be positive and finite, got {value}")
    return tuple(float(v) for v in values)


def check_float_tensor(name: str, x: object) -> torch.Tensor:
    """``x`` if it is a floating-point tensor; a TypeError naming its type or dtype otherwise.

    Rotating or adding codes to integers would truncate (``apply_rope`` on int64 gives zeros).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def check_float_dtype(name: str, dtype: object) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating-point torch.dtype, got {dtype!r}")
    return dtype


def check_choice(name: str, value: object, choices: Iterable[str]) -> str:
    choices = tuple(choices)
    if value not in choices:
        valid = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {valid}; got {value!r}")
    return value  # type: ignore[return-value]


def is_integer_dtype(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def as_positions(
    positions_or_length: int | torch.Tensor | Iterable[int],
    *,
    device: torch.device | str | None = None,
    name: str = "positions",
) -> torch.Tensor:
    """Integer positions as an int64 tensor (errors call them ``name``).

    An int n means ``arange(n)``; a tensor or sequence must hold integers (any shape).
    Float positions are refused rather than truncated: a position is an index, and
    silently flooring 2.7 to 2 would hide a bug upstream.
    """
    if isinstance(positions_or_length, bool):
        raise TypeError(f"{name} must be an int length or integer positions, got {positions_or_length!r}")
    if isinstance(positions_or_length, Integral):
        length = int(positions_or_length)
        if length <= 0:
            raise ValueError(f"length must be positive, got {length}")
        return torch.arange(length, dtype=torch.int64, device=device)
    if isinstance(positions_or_length, torch.Tensor):
        positions = positions_or_length
    else:
        try:
            positions = torch.as_tensor(list(positions_or_length))
        except (TypeError, ValueError, RuntimeError) as error:
            raise TypeError(
                f"{name} must be an int length, an integer tensor or a sequence of ints, "
                f"got {positions_or_length!r}"
            ) from error
    _check_not_meta(positions, device, name)
    if not is_integer_dtype(positions.dtype):
        raise ValueError(
            f"{name} must be integers, got dtype {positions.dtype}"
            + (f" with values such as {positions.flatten()[0].item()!r}" if positions.numel() else "")
        )
    if positions.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(positions.shape)}")
    return positions.to(dtype=torch.int64, device=device)


def _check_not_meta(positions: torch.Tensor, device: torch.device | str | None, name: str) -> None:
    """A ValueError for positions on the meta device (shapes only, no values) going to a real device:
    torch's own error ("Cannot copy out of meta tensor") names neither the argument nor the cause."""
    if positions.device.type == "meta" and device is not None and torch.device(device).type != "meta":
        raise ValueError(
            f"{name} are on the meta device (a shape without values) and cannot be used on {device}: "
            "make them on the device of the input"
        )


def same_shape(shape: Sequence, expected: Sequence) -> bool:
    """Whether ``shape`` is ``expected``, dimension by dimension: under torch.compile's dynamic shapes a
    ``torch.Size`` of symbolic sizes is not equal to a tuple of them, though every size is."""
    return len(shape) == len(expected) and all(
        size == other for size, other in zip(shape, expected, strict=True)
    )


def row_shapes(row: tuple[int, ...], batch: int) -> str:
    """The shapes a per-token tensor of one row's shape ``row`` may take for a batch of ``batch`` rows, for
    error messages: ``[s]``, ``[1, s]`` (one row for every row) or ``[b, s]``."""
    shape = ", ".join(map(str, row))
    return f"[{shape}] or [1, {shape}]" if batch == 1 else f"[{shape}], [1, {shape}] or [{batch}, {shape}]"


def as_coordinates(
    positions: torch.Tensor | Iterable,
    axes: int,
    *,
    device: torch.device | str | None = None,
    name: str = "positions",
) -> torch.Tensor:
    """Positions on ``axes`` coordinate axes, ``[..., s, axes]``: int64 when they are integers (exact),
    float64 when they are floats (used as given).

    Raises:
        TypeError: bool or complex coordinates, something that is not a tensor or a nested sequence.
        ValueError: a last dimension that is not ``axes`` (the number of coordinate columns), no
            sequence dimension, no tokens, non-finite coordinates (the first one is named).
    """
    if not isinstance(positions, torch.Tensor):
        try:
            positions = torch.as_tensor(positions)
        except (TypeError, ValueError, RuntimeError) as error:
            raise TypeError(
                f"{name} must be a tensor of coordinates [..., s, {axes}], got {positions!r}"
            ) from error
    _check_not_meta(positions, device, name)
    if positions.dtype == torch.bool or positions.dtype.is_complex:
        raise TypeError(f"{name} must hold integer or real coordinates, got dtype {positions.dtype}")
    if positions.dim() < 2 or positions.shape[-1] != axes:
        raise ValueError(
            f"{name} must be [..., s, {axes}] with one column per coordinate axis ({axes}), got shape "
            f"{tuple(positions.shape)}"
        )
    if positions.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(positions.shape)}")
    if positions.dtype.is_floating_point:
        positions = positions.to(dtype=torch.float64, device=device)
        if not torch.compiler.is_compiling():
            bad = positions[~torch.isfinite(positions)]
            if bad.numel():
                raise ValueError(f"{name} must be finite coordinates, got {float(bad[0])}")
        return positions
    return positions.to(dtype=torch.int64, device=device)


def check_positive_ints(name: str, values: object, *, even: bool = False) -> tuple[int, ...]:
    """A non-empty sequence of positive ints (even ones with ``even``), each named by its index."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TypeError(
            f"{name} must be a sequence of positive ints, got {values!r} ({type(values).__name__})"
        )
    values = tuple(values)
    if not values:
        raise ValueError(f"{name} must hold at least one value, got {values!r}")
    check = check_even_positive_int if even else check_positive_int
    return tuple(check(f"{name}[{index}]", value) for index, value in enumerate(values))


#: Positions beyond ±2^62 are refused where distances are taken: the distance of two could overflow int64.
MAX_ABS_POSITION = 1 << 62


def check_on_device(condition: torch.Tensor, message: str) -> None:
    """Stop the call with ``message`` (a RuntimeError) unless every element of the bool tensor
    ``condition`` holds, without reading it on the host: the check that compiled code makes where the
    eager path raises a ValueError naming the value (reading the value would be a host synchronisation)."""
    torch._assert_async(condition.all(), message)


def check_distance_range(q_positions: torch.Tensor, k_positions: torch.Tensor) -> None:
    """A ValueError naming the position whose distance to another could overflow int64 (under
    torch.compile, the same check on the device)."""
    for name, positions in (("q_positions", q_positions), ("k_positions", k_positions)):
        message = f"{name} must lie within ±2^62 so that distances fit in int64"
        if torch.compiler.is_compiling():
            check_on_device(positions.abs() <= MAX_ABS_POSITION, message)
            continue
        outside = positions[(positions > MAX_ABS_POSITION) | (positions < -MAX_ABS_POSITION)]
        if outside.numel():
            raise ValueError(f"{message}, got {int(outside[0])}")


def pair_positions(q_positions: torch.Tensor, k_positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Query and key positions checked for a bias: each ``[n]`` or ``[b, n]``, one batch size, every
    distance representable in int64.

    Raises:
        ValueError: float or empty positions, more than 2 dimensions, batch sizes that differ, positions
            beyond ±2^62.
    """
    q_positions = as_positions(q_positions, name="q_positions")
    k_positions = as_positions(k_positions, name="k_positions")
    for name, positions in (("q_positions", q_positions), ("k_positions", k_positions)):
        if positions.dim() not in (1, 2):
            raise ValueError(f"{name} must be [n] or [b, n], got shape {tuple(positions.shape)}")
    if q_positions.dim() == 2 and k_positions.dim() == 2 and q_positions.shape[0] != k_positions.shape[0]:
        raise ValueError(
            f"q_positions and k_positions must have the same batch size, got {q_positions.shape[0]} "
            f"and {k_positions.shape[0]}"
        )
    check_distance_range(q_positions, k_positions)
    return q_positions, k_positions


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32 when it is a half type, as it is otherwise (a float64 model's numbers stay float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))
