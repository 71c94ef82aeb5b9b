"""Chapter 10, claims N1–N4: BatchNorm, LayerNorm and RMSNorm on a sequence model's tokens.

BatchNorm normalises each channel with statistics over every token of every sequence in the batch
(``(b, n, d)`` read as ``b·n`` samples of ``d`` channels, as ``torch.nn.BatchNorm1d`` on the
flattened tokens does); LayerNorm and RMSNorm normalise each token over its own ``d`` channels. The
functions here are the chapter's implementations; torch's modules are the oracle.
"""

from __future__ import annotations

import torch

from attnref import _validate as check

Tensor = torch.Tensor


def batch_norm_tokens(x: Tensor, eps: float = 1e-5, key_mask: Tensor | None = None) -> Tensor:
    """BatchNorm of ``x (b, n, d)`` in training mode, no affine part: each channel centred and scaled
    by the mean and the biased variance over the tokens — all ``b·n`` of them, padding included, as
    a module that sees the padded batch does, or only the real ones (``key_mask (b, n)``, True = real)."""
    check.floating("x", x, exact_dim=3)
    if key_mask is None:
        tokens = x.reshape(-1, x.shape[-1])
    else:
        if tuple(key_mask.shape) != tuple(x.shape[:2]) or key_mask.dtype != torch.bool:
            raise ValueError(f"key_mask must be a boolean tensor of shape {tuple(x.shape[:2])} (b, n) for x "
                             f"{check.shape_of(x)}, got {getattr(key_mask, 'shape', key_mask)!r}")
        tokens = x[key_mask]
    mean = tokens.mean(0)
    var = tokens.var(0, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps)


def running_statistics(batches: list[Tensor], momentum: float = 0.1) -> tuple[Tensor, Tensor]:
    """The running mean and (unbiased) variance that ``torch.nn.BatchNorm1d`` keeps after seeing
    ``batches`` (each ``(samples, d)``) in training mode: ``r ← (1 − m) r + m · statistic``,
    starting from mean 0 and variance 1."""
    mean = torch.zeros(batches[0].shape[-1], dtype=batches[0].dtype)
    var = torch.ones_like(mean)
    for batch in batches:
        mean = (1 - momentum) * mean + momentum * batch.mean(0)
        var = (1 - momentum) * var + momentum * batch.var(0, unbiased=True)
    return mean, var


def batch_norm_eval(x: Tensor, mean: Tensor, var: Tensor, eps: float = 1e-5) -> Tensor:
    """BatchNorm in evaluation mode: the stored running statistics, the same for every input."""
    return (x - mean) / torch.sqrt(var + eps)


def causal_block(x: Tensor, norm: str, eps: float = 1e-5) -> Tensor:
    """One causal attention layer (queries = keys = values = ``x (b, n, d)``, attnref's causal
    scaled dot-product attention) followed by a norm over its output: ``"batch"`` (statistics over
    every token of the batch, :func:`batch_norm_tokens`), ``"layer"`` or ``"rms"`` (per token)."""
    from attnref.attention import scaled_dot_product_attention
    from attnref.decoder import rms_norm
    y = scaled_dot_product_attention(x, x, x, causal=True).output
    if norm == "batch":
        return batch_norm_tokens(y, eps)
    if norm == "layer":
        return torch.nn.functional.layer_norm(y, y.shape[-1:], eps=eps)
    if norm == "rms":
        return rms_norm(y, eps=eps)
    raise ValueError(f"norm must be 'batch', 'layer' or 'rms', got {norm!r}")


def future_gradient(x: Tensor, norm: str, position: int = 0) -> Tensor:
    """``max |∂ out[0, position] / ∂ x[:, t]|`` over the later positions ``t > position`` of the first
    sequence and every position of the others: how much the output at ``position`` depends on
    inputs a causal model must not see (0 for a per-token norm)."""
    x = x.detach().clone().requires_grad_(True)
    out = causal_block(x, norm)
    (gradient,) = torch.autograd.grad(out[0, position].sum(), x)
    later = torch.cat([gradient[0, position + 1:].flatten(), gradient[1:].flatten()])
    return later.abs().max()


def centring_gap(x: Tensor, eps: float = 1e-6) -> Tensor:
    """``‖RMSNorm(x) − LN(x)‖ / ‖LN(x)‖`` per token (no gains): how much dropping LayerNorm's
    centring changes a token, ``(…,)``; it is ``√(2 − 2√(1 − ρ²))/1`` with ``ρ = mean(x)/rms(x)``."""
    from attnref.decoder import rms_norm
    rms = rms_norm(x, eps=eps)
    ln = torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps)
    return (rms - ln).norm(dim=-1) / ln.norm(dim=-1)


def mean_to_rms(x: Tensor) -> Tensor:
    """``ρ = mean(x) / rms(x)`` per token: the share of the token's size that lies along (1, …, 1)."""
    return x.mean(-1) / x.pow(2).mean(-1).sqrt()
