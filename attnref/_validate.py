"""Input checks shared by every attnref function.

Each check raises ``ValueError`` with a message that names the argument and its shape, so a
caller never meets a bare broadcasting error from torch or, worse, a silent wrong answer.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def shape_of(x: Tensor) -> str:
    """The shape as a tuple: ``(2, 3, 4)``, ``(4,)``, ``()``."""
    return str(tuple(x.shape))


def floating(name: str, x: Tensor, *, min_dim: int = 1, max_dim: int | None = None,
             exact_dim: int | None = None, allow_inf: bool = False) -> Tensor:
    """Check that ``x`` is a finite floating tensor of an allowed rank and return it."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(
            f"{name} must have a floating dtype (float32 or float64), got {x.dtype} "
            f"with shape {shape_of(x)}"
        )
    if exact_dim is not None and x.dim() != exact_dim:
        raise ValueError(f"{name} must have {exact_dim} dimensions, got shape {shape_of(x)}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimensions, got shape {shape_of(x)}")
    if max_dim is not None and x.dim() > max_dim:
        raise ValueError(f"{name} must have at most {max_dim} dimensions, got shape {shape_of(x)}")
    if torch.isnan(x).any():
        raise ValueError(f"{name} contains NaN (shape {shape_of(x)}); attnref does not propagate NaN")
    if not allow_inf and torch.isinf(x).any():
        raise ValueError(f"{name} contains ±inf (shape {shape_of(x)}); inputs must be finite")
    return x


def same_dtype(**tensors: Tensor | None) -> torch.dtype:
    """All given tensors share one dtype; return it."""
    present = {k: v for k, v in tensors.items() if v is not None}
    dtypes = {v.dtype for v in present.values()}
    if len(dtypes) > 1:
        listing = ", ".join(f"{k}: {v.dtype} {shape_of(v)}" for k, v in present.items())
        raise ValueError(f"inputs must share one dtype, got {listing}")
    return dtypes.pop()


def dim_equal(what: str, name_a: str, a: Tensor, axis_a: int, name_b: str, b: Tensor, axis_b: int) -> None:
    """``a.shape[axis_a] == b.shape[axis_b]`` or a ValueError naming both shapes."""
    if a.shape[axis_a] != b.shape[axis_b]:
        raise ValueError(
            f"{what}: {name_a} has shape {shape_of(a)} and {name_b} has shape {shape_of(b)} "
            f"({a.shape[axis_a]} != {b.shape[axis_b]})"
        )


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """The broadcast of the shapes, or None when they do not broadcast.

    Plain Python on purpose: ``torch.broadcast_shapes`` imports sympy on its first call (~0.5 s).
    """
    length = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(1, length + 1):
        sizes = {s[-axis] for s in shapes if len(s) >= axis}
        non_one = sizes - {1}
        if len(non_one) > 1:
            return None
        result.append(non_one.pop() if non_one else 1)
    return tuple(reversed(result))


def batch_compatible(names: tuple[str, ...], tensors: tuple[Tensor, ...], trailing: int = 2) -> None:
    """The leading (batch) dimensions of the tensors must broadcast together."""
    if broadcast_shapes(*(tuple(t.shape[:-trailing]) for t in tensors)) is None:
        listing = ", ".join(f"{n} {shape_of(t)}" for n, t in zip(names, tensors))
        raise ValueError(f"batch dimensions do not broadcast: {listing}")


def positive_int(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value
