"""The keys, values and positions one attention layer has seen: a preallocated cache, with StreamingLLM's sinks.

Decoding n tokens with a cache that concatenates on every step copies O(n²) bytes; this one writes each
step into memory allocated ahead (a given ``capacity``, or grown by doubling: amortised O(1) per
token). With ``sinks=N, window=W`` it keeps the first N tokens and the last W (Xiao et al., 2024,
"Efficient Streaming Language Models with Attention Sinks", https://arxiv.org/abs/2309.17453): memory
stays constant however long the stream, and, as StreamingLLM does, positions are the tokens' places in
the cache, 0 … N + W − 1, not in the text, so a key's position changes as older tokens leave. On n axes
a place is the same on every axis, (p, …, p): the diagonal, where M-RoPE puts text (a sink cache takes
no given positions, so every token is text there). Such a cache holds keys as projected (before any
rotation) and attention rotates them with their current positions at every call
(:attr:`KVCache.positions_move`).

Notation used for tensor shapes: b batch, h_kv key/value heads, t cached tokens, d head width, n axes.
"""

from __future__ import annotations

import weakref

import torch

from posenc._validation import check_int, check_positive_int

#: The first allocation of a cache without a capacity, in tokens (doubled as it fills).
INITIAL_CAPACITY = 64


class KVCache:
    """Keys and values ``[b, h_kv, t, d]`` and positions ``[t]`` / ``[b, t]`` (``[t, n]`` / ``[b, t, n]`` on
    n axes) of the tokens seen so far, for one attention layer. Coordinates are kept as given: int64,
    or float64 from the first fractional ones on.

    Args:
        capacity: tokens the cache holds before it must grow (allocated on the first append); None
            grows by doubling. Appending past a given capacity raises (unless sinks/window are set).
        sinks, window: StreamingLLM: keep the first ``sinks`` tokens and the last ``window`` ones;
            capacity is then sinks + window (a given capacity must equal it).

    Raises:
        ValueError: negative sinks, a non-positive window or capacity, sinks without a window, a
            capacity that disagrees with sinks + window.
    """

    def __init__(
        self, capacity: int | None = None, *, sinks: int | None = None, window: int | None = None
    ) -> None:
        self.sinks, self.window = _streaming(sinks, window)
        if self.window is not None:
            kept = self.sinks + self.window
            if capacity is not None and check_positive_int("capacity", capacity) != kept:
                raise ValueError(f"capacity={capacity} must be sinks + window = {kept} (or not given)")
            capacity = kept
        self.capacity = None if capacity is None else check_positive_int("capacity", capacity)
        self.length = 0
        self._owner: weakref.ref | None = None  # the attention layer whose keys it holds
        self._keys: torch.Tensor | None = None  # [b, h_kv, C, d]
        self._values: torch.Tensor | None = None  # [b, h_kv, C, d]
        self._positions: torch.Tensor | None = None  # [C(, n)] or [b, C(, n)]

    # --- what attention reads ----------------------------------------------------------------------

    @property
    def keys(self) -> torch.Tensor | None:
        """``[b, h_kv, t, d]``: a view of the cached keys."""
        return None if self._keys is None else self._keys[:, :, : self.length]

    @property
    def values(self) -> torch.Tensor | None:
        """``[b, h_kv, t, d]``: a view of the cached values."""
        return None if self._values is None else self._values[:, :, : self.length]

    @property
    def positions(self) -> torch.Tensor | None:
        """Positions of the cached tokens: as appended, or, keeping sinks, their places 0 … t − 1 (on n
        axes the diagonal ``[t, n]``, each place on every axis)."""
        if self._positions is None:
            return None
        if self.positions_move:
            places = torch.arange(self.length, device=self._positions.device)  # [t]
            return places if self._columns == 1 else places[:, None].expand(self.length, self._columns)
        return (
            self._positions[..., : self.length]
            if self._columns == 1
            else self._positions[..., : self.length, :]
        )

    @property
    def positions_move(self) -> bool:
        """Whether a cached key's position changes as older tokens leave (sinks and a window): attention
        then caches keys before rotation and rotates them at their current positions every call."""
        return self.window is not None

    def next_position(self, columns: int = 1, incoming: int = 1) -> int | torch.Tensor:
        """Where the next ``incoming`` tokens go by default: after the cached ones on one axis; on several,
        one past the largest cached coordinate (text after an image, as M-RoPE's ``rope_deltas``), per
        row (int64 ``[b]``) when each row has its own coordinates; keeping sinks, their places once the
        oldest window tokens have left."""
        if self.positions_move:
            return min(self.length, self.capacity - incoming)
        if columns == 1 or self._positions is None:
            return self.length
        positions = self.positions  # [t, n] or [b, t, n]
        if positions.dim() == 2:
            return int(positions.max().floor()) + 1
        return positions.amax(dim=(-2, -1)).floor().long() + 1  # [b]: Qwen2-VL's rope_deltas are per row

    # --- writing ------------------------------------------------------------------------------------

    def claim(self, owner: object, name: str = "layer") -> None:
        """Bind the cache to the one layer (``owner``) whose keys it holds, on its first use.

        Raises:
            ValueError: a cache that already holds another layer's keys: one cache shared by several
                layers (``[KVCache()] * n_layers``) would give each layer the keys of the others.
        """
        held = None if self._owner is None else self._owner()
        if held is owner:
            return
        if held is not None:
            raise ValueError(
                f"this KVCache already holds the keys of another {name}; each attention layer needs a cache "
                "of its own (model.new_caches(), or [KVCache() for _ in range(n_layers)], not "
                "[KVCache()] * n_layers)"
            )
        self._owner = weakref.ref(owner)

    def append(
        self, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor, columns: int = 1
    ) -> None:
        """Add keys and values ``[b, h_kv, s, d]`` at ``positions`` (``columns`` coordinates each), into the
        memory allocated ahead; keeping sinks, the oldest window tokens leave to make room.

        Raises:
            ValueError: another batch size, head count or width than the cached keys; more tokens than
                a fixed capacity holds; keeping sinks, more tokens in one call than the window.
        """
        s = keys.shape[2]
        if self._keys is None:
            self._allocate(keys, values, positions, columns)
        self._check_shapes(keys, values)
        if self.positions_move:
            self._make_room(s)
        elif self.length + s > self._keys.shape[2]:
            self._grow(self.length + s)
        end = self.length + s
        self._keys[:, :, self.length : end] = keys
        self._values[:, :, self.length : end] = values
        self._write_positions(positions, self.length, end)
        self.length = end

    def _allocate(self, keys, values, positions, columns) -> None:
        b, h, s, d = keys.shape
        capacity = self.capacity if self.capacity is not None else max(INITIAL_CAPACITY, s)
        self._columns = columns
        self._keys = keys.new_empty(b, h, capacity, d)
        self._values = values.new_empty(b, h, capacity, values.shape[-1])
        shared = positions.dim() == (1 if columns == 1 else 2)
        shape = (capacity,) if shared else (b, capacity)
        self._positions = positions.new_zeros(shape + (() if columns == 1 else (columns,)))

    def _check_shapes(self, keys, values) -> None:
        cached = self._keys.shape
        if keys.shape[0] != cached[0] or keys.shape[1] != cached[1] or keys.shape[3] != cached[3]:
            raise ValueError(
                f"the cache holds keys of batch {cached[0]}, {cached[1]} heads and width {cached[3]}; got keys "
                f"of shape {tuple(keys.shape)} (a cache serves one batch: make a new one for another)"
            )
        if values.shape[:3] != keys.shape[:3]:
            raise ValueError(
                f"values of shape {tuple(values.shape)} do not match keys of shape {tuple(keys.shape)}"
            )

    def _grow(self, needed: int) -> None:
        if self.capacity is not None:
            raise ValueError(
                f"the cache holds {self.capacity} tokens (its capacity) and {self.length} are cached; "
                f"{needed - self.length} more do not fit"
            )
        size = max(needed, 2 * self._keys.shape[2])
        self._keys = _enlarged(self._keys, 2, size, self.length)
        self._values = _enlarged(self._values, 2, size, self.length)
        self._positions = _enlarged(self._positions, self._sequence_dim(), size, self.length)

    def _make_room(self, s: int) -> None:
        """Keeping sinks: move the window left so that s new tokens fit, the oldest leaving."""
        if s > self.window:
            raise ValueError(
                f"a call adds {s} tokens, more than the window of {self.window} a sink cache keeps; "
                f"add at most {self.window} at a time"
            )
        leaving = self.length + s - self.capacity
        if leaving <= 0:
            return
        start = self.sinks
        for buffer in (self._keys, self._values):
            buffer[:, :, start : self.length - leaving] = buffer[:, :, start + leaving : self.length].clone()
        self.length -= leaving

    def _write_positions(self, positions: torch.Tensor, start: int, end: int) -> None:
        if positions.is_floating_point() and positions.dtype != self._positions.dtype:
            # fractional coordinates after integer ones: float64 holds both exactly (integers below 2^53)
            self._positions = self._positions.to(torch.float64)
        dim = self._sequence_dim()
        shared = self._positions.dim() == (1 if self._columns == 1 else 2)
        incoming_shared = positions.dim() == (1 if self._columns == 1 else 2)
        if shared and not incoming_shared:  # one row per batch row from now on
            self._positions = self._positions.expand(positions.shape[0], *self._positions.shape).clone()
            dim = self._sequence_dim()
        target = self._positions.narrow(dim, start, end - start)
        target.copy_(positions.expand_as(target) if incoming_shared and not shared else positions)

    def _sequence_dim(self) -> int:
        return -1 if self._columns == 1 else -2

    def extra_repr(self) -> str:
        streaming = f", sinks={self.sinks}, window={self.window}" if self.window is not None else ""
        return f"length={self.length}, capacity={self.capacity}{streaming}"

    def __repr__(self) -> str:
        return f"KVCache({self.extra_repr()})"


def _streaming(sinks: int | None, window: int | None) -> tuple[int, int | None]:
    if window is None:
        if sinks is not None:
            raise ValueError(f"sinks={sinks} needs a window: the tokens kept after the sinks")
        return 0, None
    window = check_positive_int("window", window)
    sinks = 0 if sinks is None else check_int("sinks", sinks)
    if sinks < 0:
        raise ValueError(f"sinks must be ≥ 0, got {sinks}")
    return sinks, window


def _enlarged(buffer: torch.Tensor, dim: int, size: int, used: int) -> torch.Tensor:
    """``buffer`` with room for ``size`` along ``dim``, its first ``used`` entries copied."""
    shape = list(buffer.shape)
    shape[dim] = size
    larger = buffer.new_empty(shape) if buffer.is_floating_point() else buffer.new_zeros(shape)
    larger.narrow(dim, 0, used).copy_(buffer.narrow(dim, 0, used))
    return larger
