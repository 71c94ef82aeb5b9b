r"""Chapter 10b (claims S1, S2): a sigmoid gate between attention and :math:`W^O` (Qiu et al. 2025).

One head, its attention weights ``A`` (n, n) held fixed, tokens ``X`` (n, d):

* without a gate the head's output is :math:`A X W_V W^O`: linear in ``X``, through one fixed
  matrix :math:`W_V W^O` of rank at most :math:`d_v` (chapter 2's L1);
* with the gate, :math:`(\sigma(X W_g + b_g) \odot A X W_V)\, W^O`: token ``t``'s mixed input
  :math:`(A X)_t` goes through :math:`W_V \operatorname{diag}(\sigma(x_t W_g + b_g)) W^O`, a map that
  depends on the token — not linear in ``X``, not one fixed matrix. Every such map still ends in
  :math:`W^O`, so every output row lies in the :math:`d_v`-dimensional row space of :math:`W^O`.

Weights are ``(in, out)``: ``w_v`` (d, d_v), ``w_o`` (d_v, d), ``w_g`` (d, d_v), ``b_g`` (d_v,).
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def _check(x: Tensor, a: Tensor, w_v: Tensor, w_o: Tensor, w_g: Tensor | None, b_g: Tensor | None) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"x must be a (n, d) tensor of tokens, got {tuple(getattr(x, 'shape', ())) or type(x).__name__}")
    n, d = x.shape
    if not isinstance(a, torch.Tensor) or tuple(a.shape) != (n, n):
        raise ValueError(f"a must be the ({n}, {n}) attention weights of the {n} tokens of x {tuple(x.shape)}, "
                         f"got {tuple(getattr(a, 'shape', ()))}")
    if not isinstance(w_v, torch.Tensor) or w_v.dim() != 2 or w_v.shape[0] != d:
        raise ValueError(f"w_v must have shape ({d}, d_v) for x {tuple(x.shape)}, got {tuple(getattr(w_v, 'shape', ()))}")
    d_v = w_v.shape[1]
    if not isinstance(w_o, torch.Tensor) or tuple(w_o.shape) != (d_v, d):
        raise ValueError(f"w_o must have shape ({d_v}, {d}) = (d_v, d) for w_v {tuple(w_v.shape)}, "
                         f"got {tuple(getattr(w_o, 'shape', ()))}")
    if w_g is not None and (not isinstance(w_g, torch.Tensor) or tuple(w_g.shape) != (d, d_v)):
        raise ValueError(f"w_g must have shape ({d}, {d_v}) = (d, d_v), got {tuple(getattr(w_g, 'shape', ()))}")
    if b_g is not None and (w_g is None or tuple(b_g.shape) != (d_v,)):
        raise ValueError(f"b_g needs w_g and shape ({d_v},), got {tuple(getattr(b_g, 'shape', ()))}")


def gate_values(x: Tensor, w_g: Tensor, b_g: Tensor | None = None) -> Tensor:
    r""":math:`\sigma(X W_g + b_g)` (n, d_v): one gate per token and value coordinate."""
    z = x @ w_g
    return torch.sigmoid(z if b_g is None else z + b_g)


def head_output(x: Tensor, a: Tensor, w_v: Tensor, w_o: Tensor, w_g: Tensor | None = None,
                b_g: Tensor | None = None) -> Tensor:
    r"""The head's output (n, d) for fixed weights ``a``: :math:`A X W_V W^O`, or with a gate
    :math:`(\sigma(X W_g + b_g) \odot A X W_V) W^O`."""
    _check(x, a, w_v, w_o, w_g, b_g)
    mixed = a @ x @ w_v                                   # (n, n) @ (n, d) @ (d, d_v) -> (n, d_v)
    if w_g is not None:
        mixed = gate_values(x, w_g, b_g) * mixed          # (n, d_v)
    return mixed @ w_o                                    # (n, d)


def token_maps(x: Tensor, w_v: Tensor, w_o: Tensor, w_g: Tensor | None = None, b_g: Tensor | None = None) -> Tensor:
    r"""Per token the map from its mixed input :math:`(A X)_t` to its output, (n, d, d):
    :math:`W_V \operatorname{diag}(\sigma(x_t W_g + b_g)) W^O` — without a gate :math:`W_V W^O` for
    every token."""
    _check(x, torch.eye(x.shape[0], dtype=x.dtype), w_v, w_o, w_g, b_g)
    if w_g is None:
        return (w_v @ w_o).expand(x.shape[0], -1, -1)
    g = gate_values(x, w_g, b_g)                          # (n, d_v)
    return (w_v[None] * g[:, None, :]) @ w_o              # (n, d, d_v) @ (d_v, d) -> (n, d, d)


def jacobian(x: Tensor, a: Tensor, w_v: Tensor, w_o: Tensor, w_g: Tensor | None = None,
             b_g: Tensor | None = None) -> Tensor:
    """The Jacobian of :func:`head_output` with respect to ``x`` at ``x``, flattened to (n·d, n·d)
    (``a`` held fixed)."""
    _check(x, a, w_v, w_o, w_g, b_g)
    n, d = x.shape
    J = torch.autograd.functional.jacobian(lambda t: head_output(t, a, w_v, w_o, w_g, b_g), x)
    return J.reshape(n * d, n * d)


def additivity_gap(x: Tensor, y: Tensor, a: Tensor, w_v: Tensor, w_o: Tensor, w_g: Tensor | None = None,
                   b_g: Tensor | None = None) -> float:
    """``max |f(X + Y) − f(X) − f(Y)| / max |f(X + Y)|`` (0 for a linear map)."""
    f = lambda t: head_output(t, a, w_v, w_o, w_g, b_g)   # noqa: E731
    total = f(x + y)
    return float((total - f(x) - f(y)).abs().max() / total.abs().max().clamp_min(1e-300))


def numerical_rank(m: Tensor, rtol: float | None = None) -> int:
    """Singular values above ``rtol · σ₁`` (default: max(shape) × the dtype's ε, as numpy's
    matrix_rank)."""
    s = torch.linalg.svdvals(m)
    if rtol is None:
        rtol = max(m.shape[-2:]) * torch.finfo(m.dtype).eps
    return int((s > rtol * s[..., :1]).sum())
