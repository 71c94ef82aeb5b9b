"""Input checks shared by every attnref function: one check per kind of argument.

Each check raises ``ValueError`` with a message that names the argument and its shape, so a
caller never meets a bare broadcasting error from torch or, worse, a silent wrong answer.

* tensors: :func:`floating` (dtype, rank, NaN/inf), :func:`same_dtype` (and one device),
  :func:`dim_equal`, :func:`batch_compatible`, :func:`vector` (biases, gains);
* scalars: :func:`positive_int`, :func:`real_number` (``scale``, ``eps``), :func:`boolean`
  (``causal``, ``norm_first``, ``bias``), :func:`strength` (``beta``), :func:`axis` (``dim``),
  :func:`floating_dtype` (``dtype``), :func:`instance` (weights dataclasses, configs);
* values: :func:`has_values` (meta tensors carry shapes only), :func:`any_true`;
* masks: :func:`mask`, :func:`key_mask`, :func:`combine_masks`;
* attention weights: :func:`weight_rows`;
* the switch: :func:`checks` (a context manager), :func:`set_checks`, :func:`values_checked`.

**Value checks can step aside.** The checks that read a tensor's values — NaN/±inf scans, an
additive mask's NaN/+inf, overflowed scores, a zero row where ε = 0 — need the host to wait for
the computation (one ``bool(tensor)`` each: on a GPU a device synchronisation) and stop
``torch.compile`` and ``torch.func.vmap``, which cannot branch on data. They are on by default;
``with attnref.checks(False):`` (or ``attnref.set_checks(False)``) turns them off, and they are off
by themselves while ``torch.compile`` traces (``torch.compiler.is_compiling()``) and inside
``torch.func.vmap``. The checks of
types, shapes, dtypes and devices read no values and always run. Messages are formatted only
when a check fails.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import numbers
from typing import Iterator

import numpy
import torch

Tensor = torch.Tensor

#: Whether the value checks run (see the module docstring); per thread and task, default on.
_VALUE_CHECKS: contextvars.ContextVar[bool] = contextvars.ContextVar("attnref_value_checks", default=True)


def values_checked() -> bool:
    """Whether the checks that read tensor values run now: the switch is on, ``torch.compile``
    is not tracing and ``torch.func.vmap`` is not mapping (neither can branch on values; the
    switch is read outside them)."""
    return not torch.compiler.is_compiling() and _VALUE_CHECKS.get() and not _vmapping()


def _vmapping() -> bool:
    """Whether the innermost ``torch.func`` transform running now is ``vmap`` (a value check
    there would raise torch's "data-dependent control flow" RuntimeError)."""
    if torch._C._functorch.maybe_current_level() is None:       # no transform: the common case, one C call
        return False
    try:
        from torch._C._functorch import TransformType
        from torch._functorch.pyfunctorch import retrieve_current_functorch_interpreter
        return retrieve_current_functorch_interpreter().key() == TransformType.Vmap
    except (ImportError, AttributeError, RuntimeError):          # another torch: assume a vmap-like transform
        return True


def set_checks(enabled: bool) -> bool:
    """Turn the value checks on or off for the current thread (and task); returns the previous setting.

    Off: no NaN/±inf scan, no mask value check, no overflow check — no host synchronisation, and
    ``torch.compile(fullgraph=True)`` and ``torch.func.vmap`` trace attnref's functions. Shape,
    dtype and device checks still run. Prefer the context manager :func:`checks`."""
    previous = _VALUE_CHECKS.get()
    _VALUE_CHECKS.set(boolean("enabled", enabled))
    return previous


@contextlib.contextmanager
def checks(enabled: bool = True) -> Iterator[None]:
    """``with attnref.checks(False): ...`` runs the block without the value checks (see
    :func:`set_checks`); the previous setting is restored on leaving, also after an exception."""
    token = _VALUE_CHECKS.set(boolean("enabled", enabled))
    try:
        yield
    finally:
        _VALUE_CHECKS.reset(token)

#: The half-precision formats. attnref computes scores, softmax and normalisation statistics of
#: their inputs in float32 and returns results in the input's dtype (as transformers' Llama and
#: x-transformers do); float32 and float64 inputs are computed in their own dtype.
HALF_PRECISION = (torch.float16, torch.bfloat16)
#: The floating dtypes attnref computes with (float8 formats are refused: torch has no arithmetic for them).
FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def working_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype attnref computes in for inputs of ``dtype``: float32 for float16/bfloat16, else ``dtype``."""
    return torch.float32 if dtype in HALF_PRECISION else dtype


def has_values(x: Tensor) -> bool:
    """Whether a value check may read ``x``: False for a meta tensor (a shape and a dtype but no
    values) and whenever the value checks are off (:func:`values_checked`)."""
    return x.device.type != "meta" and values_checked()


def any_true(condition: Tensor) -> bool:
    """``bool(condition.any())`` for a value check: False on a meta tensor or with the value checks
    off (nothing to report). Not for computing: its answer depends on the switch."""
    return has_values(condition) and bool(condition.any())


def instance(name: str, value: object, kind: type | tuple[type, ...]) -> object:
    """``value`` is a ``kind`` (e.g. ``MultiHeadWeights``), or a ValueError naming what it is instead."""
    if not isinstance(value, kind):
        kinds = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise ValueError(f"{name} must be {kinds}, got {type(value).__name__}")
    return value


def floating_dtype(name: str, dtype: object) -> torch.dtype:
    """A floating ``torch.dtype`` (``float16``, ``bfloat16``, ``float32``, ``float64``)."""
    if not isinstance(dtype, torch.dtype) or dtype not in FLOATING:
        raise ValueError(f"{name} must be a floating torch.dtype, got {dtype!r}")
    return dtype


def axis(name: str, value: object, x: Tensor, x_name: str) -> int:
    """An int axis of ``x`` (``-x.dim() ≤ value < x.dim()``), not a bool or a string."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an int axis of {x_name} {shape_of(x)}, got {value!r} "
                         f"({type(value).__name__})")
    if not -x.dim() <= value < x.dim():
        raise ValueError(f"{name} = {value} is out of range for {x_name} of shape {shape_of(x)} "
                         f"(valid: {-x.dim()} … {x.dim() - 1})")
    return int(value)


def shape_of(x: Tensor) -> str:
    """The shape as a tuple: ``(2, 3, 4)``, ``(4,)``, ``()``."""
    return str(tuple(x.shape))


def floating(name: str, x: Tensor, *, min_dim: int = 1, max_dim: int | None = None,
             exact_dim: int | None = None, allow_inf: bool = False) -> Tensor:
    """Check that ``x`` is a finite floating tensor of an allowed rank and return it."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOATING:       # also the float8 formats: torch has no matmul or softmax for them
        raise ValueError(
            f"{name} must have a floating dtype (float16, bfloat16, float32 or float64), got {x.dtype} "
            f"with shape {shape_of(x)}" + (" (an 8-bit float: convert it, e.g. .to(torch.bfloat16))"
                                           if x.is_floating_point() else "")
        )
    if exact_dim is not None and x.dim() != exact_dim:
        raise ValueError(f"{name} must have {exact_dim} dimensions, got shape {shape_of(x)}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimensions, got shape {shape_of(x)}")
    if max_dim is not None and x.dim() > max_dim:
        raise ValueError(f"{name} must have at most {max_dim} dimensions, got shape {shape_of(x)}")
    if not has_values(x):         # a meta tensor (shapes only), or the value checks are off
        return x
    if all_finite(x):             # one reduction: the common case costs a fraction of the formula
        return x
    if torch.isnan(x).any():
        raise ValueError(f"{name} contains NaN (shape {shape_of(x)}); attnref does not propagate NaN")
    if not allow_inf and torch.isinf(x).any():
        raise ValueError(f"{name} contains ±inf (shape {shape_of(x)}); inputs must be finite")
    return x


def all_finite(x: Tensor) -> bool:
    """Whether every element of ``x`` is finite, in one pass: a NaN or ±inf makes the sum NaN or
    ±inf, so a finite sum proves them all finite. A non-finite sum (also when finite elements
    overflow the sum) says nothing: the caller then checks element by element. True (nothing to
    report) with the value checks off."""
    if not values_checked():
        return True
    with torch.no_grad():
        return bool(torch.isfinite(x.sum()))


def same_dtype(**tensors: Tensor | None) -> torch.dtype:
    """All given tensors share one dtype (and one device); return the dtype."""
    values = [v for v in tensors.values() if v is not None]
    if values:                                   # the common case in one pass, no message built
        first = values[0]
        dtype, device = first.dtype, first.device
        if all(v.dtype == dtype and v.device == device for v in values):
            return dtype
    present = {k: v for k, v in tensors.items() if v is not None}
    dtypes = {v.dtype for v in present.values()}
    if len(dtypes) > 1:
        listing = ", ".join(f"{k}: {v.dtype} {shape_of(v)}" for k, v in present.items())
        raise ValueError(f"inputs must share one dtype, got {listing}")
    same_device(**present)
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
    length = 0
    for s in shapes:                   # plain loops: torch.compile traces them (max(..., default=) it cannot)
        length = len(s) if len(s) > length else length
    result = [1] * length
    for s in shapes:
        offset = length - len(s)
        for i, size in enumerate(s):
            if size != 1:
                if result[offset + i] not in (1, size):
                    return None
                result[offset + i] = size
    return tuple(result)


def batch_compatible(names: tuple[str, ...], tensors: tuple[Tensor, ...], trailing: int = 2) -> None:
    """The leading (batch) dimensions of the tensors must broadcast together."""
    first = tensors[0].shape[:-trailing]
    if all(t.shape[:-trailing] == first for t in tensors):      # equal batch axes: nothing to broadcast
        return
    if broadcast_shapes(*(tuple(t.shape[:-trailing]) for t in tensors)) is None:
        listing = ", ".join(f"{n} {shape_of(t)}" for n, t in zip(names, tensors))
        raise ValueError(f"batch dimensions do not broadcast: {listing}")


def positive_int(name: str, value: int) -> int:
    """A positive Python int (not a bool, not a float such as 2.5 or 2.0)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    if value >= 2**62:
        raise ValueError(f"{name} = {value} is too large for a tensor dimension")
    return value


def same_device(**tensors: Tensor | None) -> torch.device:
    """All given tensors live on one device; return it."""
    present = {k: v for k, v in tensors.items() if v is not None}
    devices = {v.device for v in present.values()}
    if len(devices) > 1:
        listing = ", ".join(f"{k}: {v.device} {shape_of(v)}" for k, v in present.items())
        raise ValueError(f"inputs must be on one device, got {listing}")
    return devices.pop()


def boolean(name: str, value: object) -> bool:
    """A real ``bool`` or a numpy boolean (``np.True_``, as numpy comparisons give); a truthy string
    such as ``"no"``, an int or a tensor must not switch a mask on. Returns a Python ``bool``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numpy.bool_):
        return bool(value)
    raise ValueError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")


def real_number(name: str, value: object, *, nonnegative: bool = False) -> float | Tensor:
    """A finite real: a Python or numpy real (not ``bool``) or a 0-dimensional floating tensor.

    Returns a number as a Python ``float`` (an int too large for torch becomes a float), a tensor as is."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or not value.is_floating_point():
            raise ValueError(f"{name} must be a real number or a 0-dimensional floating tensor, got a "
                             f"{value.dtype} tensor of shape {shape_of(value)}")
        if not values_checked():           # reading a tensor's value syncs the host: trusted
            return value
        number = float(value.detach())
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):   # int, float, numpy scalars
        number = float(value)
    else:
        raise ValueError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {number}")
    if nonnegative and number < 0:
        raise ValueError(f"{name} must be ≥ 0, got {number}")
    return value if isinstance(value, torch.Tensor) else number


def vector(name: str, x: Tensor | None, length: int, like: Tensor, like_name: str) -> Tensor | None:
    """``None`` or a finite ``(length,)`` tensor with the dtype and device of ``like`` (biases, gains)."""
    if x is None:
        return None
    floating(name, x)
    if tuple(x.shape) != (length,):
        raise ValueError(f"{name} has shape {shape_of(x)}, expected ({length},) for {like_name} {shape_of(like)}")
    same_dtype(**{like_name: like, name: x})
    return x


def mask(value: Tensor, scores_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
         name: str = "mask", shape_name: str = "the scores' shape (..., n, m)") -> Tensor:
    """A boolean (True = may attend) or additive mask that broadcasts to ``scores_shape``."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dtype != torch.bool and value.dtype != dtype:
        raise ValueError(
            f"{name} must be boolean (True = may attend) or additive with the inputs' dtype {dtype}, "
            f"got {value.dtype} with shape {shape_of(value)}"
        )
    if value.device != device:
        raise ValueError(f"{name} of shape {shape_of(value)} is on {value.device}, the inputs on {device}")
    scores_shape = tuple(scores_shape)
    if broadcast_shapes(tuple(value.shape), scores_shape) != scores_shape:
        raise ValueError(f"{name} of shape {shape_of(value)} does not broadcast to {shape_name} = {scores_shape}")
    if value.dtype != torch.bool and has_values(value) and value.numel() > 0:
        largest = value.amax()            # one reduction: NaN if any entry is NaN, +inf if any is +inf
        if bool(torch.isnan(largest)) or bool(largest == float("inf")):
            raise ValueError(f"additive {name} of shape {shape_of(value)} contains NaN or +inf")
    return value


def key_mask(value: Tensor, keys_name: str, keys: Tensor, scores_shape: tuple[int, ...] | None = None) -> Tensor:
    """A boolean ``key_mask (..., m)``: its last axis the ``m`` key positions of ``keys``, its
    leading axes broadcasting with the scores' batch axes as a ``mask``'s do (a ``(m,)`` mask for
    every sequence, ``(B, 1, m)`` …); checked against ``scores_shape (..., n, m)`` when given.
    Returns it as a mask ``(..., 1, m)`` over the scores."""
    if not isinstance(value, torch.Tensor) or value.dtype != torch.bool:
        raise ValueError(f"key_mask must be a boolean tensor (True = real key), got "
                         f"{getattr(value, 'dtype', type(value).__name__)}")
    m = keys.shape[-2]
    if value.dim() == 0 or value.shape[-1] != m:
        raise ValueError(f"key_mask has shape {shape_of(value)}, expected (..., m) with m = {m}, the key positions "
                         f"{tuple(keys.shape[:-1])} of {keys_name} {shape_of(keys)} (leading axes broadcast)")
    if value.device != keys.device:
        raise ValueError(f"key_mask of shape {shape_of(value)} is on {value.device}, {keys_name} on {keys.device}")
    keep = value[..., None, :]                                  # (..., 1, m)
    if scores_shape is not None and broadcast_shapes(tuple(keep.shape), tuple(scores_shape)) != tuple(scores_shape):
        raise ValueError(f"key_mask of shape {shape_of(value)} does not broadcast to the scores' shape (..., n, m) = "
                         f"{tuple(scores_shape)} (its leading axes must broadcast with the batch axes "
                         f"{tuple(scores_shape[:-2])})")
    return keep


def combine_masks(mask: Tensor | None, keep: Tensor | None) -> Tensor | None:
    """``mask`` (boolean or additive) with the positions where the boolean ``keep`` is False removed."""
    if keep is None:
        return mask
    if mask is None:
        return keep
    if mask.dtype != torch.bool:
        return mask.masked_fill(~keep, float("-inf"))   # additive mask: removed positions to -inf
    return mask & keep


def strength(name: str, value: float | Tensor, scores_shape: tuple[int, ...], dtype: torch.dtype,
             device: torch.device) -> float | Tensor:
    """An inverse temperature: a finite real, or a tensor of one strength per query — last axis 1,
    broadcastable with the scores ``(..., n, m)`` (a ``(m,)`` tensor would silently act per key)."""
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return real_number(name, value)
    floating(name, value)
    if value.dtype != dtype or value.device != device:
        raise ValueError(f"{name} is {value.dtype} on {value.device} (shape {shape_of(value)}), the inputs "
                         f"{dtype} on {device}")
    if value.shape[-1] != 1 or broadcast_shapes(tuple(value.shape), tuple(scores_shape)) is None:
        raise ValueError(f"{name} of shape {shape_of(value)} must hold one value per query: shape (..., n, 1) "
                         f"broadcastable with the scores (..., n, m) = {tuple(scores_shape)}")
    return value


#: How far a row of attention weights may sum from 1 (round-off of a softmax and its products).
ROW_SUM_TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-5}


def weight_rows(name: str, weights: Tensor) -> Tensor:
    """Attention weights ``(..., m)``: finite, ≥ 0, every row summing to 1 — or all zero, a fully
    masked query — within :data:`ROW_SUM_TOLERANCE` (the one check of weight rows; the analysis
    and model modules should use it instead of their own copies)."""
    floating(name, weights, min_dim=1)
    if not has_values(weights):
        return weights
    if (weights < 0).any():
        raise ValueError(f"{name} of shape {shape_of(weights)} have negative entries; "
                         "attention weights are probabilities")
    sums = weights.sum(dim=-1)                                          # (...,)
    tolerance = ROW_SUM_TOLERANCE.get(weights.dtype, 1e-3)
    if not (((sums - 1).abs() <= tolerance) | (sums == 0)).all():
        raise ValueError(f"every row of {name} (shape {shape_of(weights)}) must sum to 1 "
                         "(or be all zero, a fully masked query)")
    return weights
