r"""Depth at initialisation: rank collapse, per-layer gradient norms, end-to-end Jacobian spectra.

Measurement helpers of chapter 7, model-agnostic where they can be (any function of a token
matrix). Statistics need many independent draws of a whole stack, so a :class:`Stack` holds
``L`` *batched* layers: each an :class:`attnref.EncoderLayer` whose tensors carry a leading axis
of ``B`` independent draws (:mod:`attnref.layers`), and one call of attnref's own layers
(:func:`attnref.blocks.encoder_layer`, in a variant of :data:`attnref.blocks.VARIANTS`)
computes ``B`` stacks at once. There is no second implementation of a layer here.

* :func:`relative_residual` — :math:`\lVert X - \mathbf 1 \bar x^\top\rVert_F / \lVert X\rVert_F`,
  the distance to the rank-one matrices of identical tokens (Dong, Cordonnier & Loukas, 2021).
* :class:`Stack` — ``L`` layers × ``B`` draws at a stated initialisation (that of
  :meth:`attnref.EncoderLayer.random`).
* :func:`run` — a stack applied in one of :data:`attnref.blocks.VARIANTS`, every depth kept.
* :func:`collapse_recursion` — a pure self-attention stack followed exactly in the split
  :math:`X = \mathbf 1 m^\top + R`, with :math:`\lVert R\rVert` carried as a logarithm, so that a
  residual of :math:`10^{-10^{11}}` is still resolved (float64 stops at its round-off floor).
* :func:`skip_recursion` — the same for :math:`X + c\,\mathrm{SA}(X)` (plain or scaled skip
  connections): an exponential collapse followed past float64's floor.
* :func:`layer_gradient_norms` — the norm of the loss gradient w.r.t. each layer's weights.
* :func:`jacobian` — end-to-end input–output Jacobians of a batched map, one per draw.
* :func:`mean_pairwise_cosine` — the tokens' mean pairwise cosine similarity.

(The entropy of attention rows is :func:`attnref.analysis.logit_scale.attention_entropy` of the
weights a layer returns.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import torch

import attnref
from attnref.blocks import VARIANTS
from attnref.layers import EncoderLayer, FeedForward, LayerNormParams, named_tensors, replace_tensors, select
from attnref.multihead import MultiHeadWeights

Tensor = torch.Tensor


# --- measurements on token matrices ------------------------------------------------------------
def relative_residual(x: Tensor) -> Tensor:
    r"""``‖X − 1 x̄ᵀ‖_F / ‖X‖_F`` of token matrices ``x (..., n, d)`` → ``(...)``.

    :math:`\bar x` is the mean token, the rank-one matrix :math:`\mathbf 1 \bar x^\top` the
    Frobenius-nearest matrix of identical rows; the ratio is 0 exactly when all tokens are equal
    and at most 1.
    """
    centred = x - x.mean(dim=-2, keepdim=True)                       # (..., n, d)
    return torch.linalg.matrix_norm(centred) / torch.linalg.matrix_norm(x)


def mean_pairwise_cosine(x: Tensor) -> Tensor:
    """Mean cosine similarity over the ``n(n−1)/2`` pairs of distinct tokens, ``(..., n, d)`` → ``(...)``."""
    unit = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)     # (..., n, d)
    gram = unit @ unit.transpose(-1, -2)                              # (..., n, n)
    n = x.shape[-2]
    return (gram.sum(dim=(-1, -2)) - gram.diagonal(dim1=-2, dim2=-1).sum(-1)) / (n * (n - 1))


def mean_token_share(x: Tensor) -> Tensor:
    r"""``√n ‖x̄‖ / ‖X‖_F``: the share of the tokens' norm in their common mean, ``(..., n, d)`` → ``(...)``
    (1 when all tokens are equal; :math:`\approx 1/\sqrt n` for independent zero-mean tokens)."""
    n = x.shape[-2]
    return math.sqrt(n) * torch.linalg.vector_norm(x.mean(dim=-2), dim=-1) / torch.linalg.matrix_norm(x)


# --- a batch of stacks at initialisation --------------------------------------------------------
@dataclass(frozen=True)
class Stack:
    """``L`` layers for ``B`` independent draws: ``layers[l]`` is one :class:`attnref.EncoderLayer`
    whose attention and FFN tensors carry the batch axis ``(B,)`` (``w_q (B, h, d, d_k)``, …).

    The initialisation is :meth:`attnref.EncoderLayer.random`'s: attention weights (and, when
    ``bias``, attention biases) from N(0, 1/d); FFN ``w_1`` from N(0, 1/d), ``w_2`` from
    N(0, 1/d_ff), zero FFN biases (left out: ``None``); LayerNorm γ = 1, β = 0 (left out: the
    LayerNorms carry no affine part, which is the identity at initialisation).
    """

    layers: tuple[EncoderLayer, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.layers, tuple) or not self.layers:
            raise ValueError(f"layers must be a non-empty tuple of batched attnref.EncoderLayer, got {self.layers!r}")
        for i, layer in enumerate(self.layers):
            if not isinstance(layer, EncoderLayer) or len(layer.batch_shape) != 1:
                raise ValueError(f"layers[{i}] must be an attnref.EncoderLayer with one batch axis (B,), got "
                                 f"{type(layer).__name__} {getattr(layer, 'batch_shape', '')}")

    @property
    def depth(self) -> int:
        return len(self.layers)

    @property
    def draws(self) -> int:
        return self.layers[0].batch_shape[0]

    @property
    def eps(self) -> float:
        """The LayerNorms' ε."""
        return self.layers[0].norm_1.eps

    @property
    def bias(self) -> bool:
        """Whether the attention has biases."""
        return self.layers[0].attention.b_q is not None

    @classmethod
    def random(cls, depth: int, draws: int, d: int, h: int, d_ff: int, bias: bool = True,
               generator: torch.Generator | None = None, dtype: torch.dtype = torch.float64,
               eps: float = 1e-5) -> "Stack":
        """Draw ``depth × draws`` layers at the initialisation stated in the class docstring."""
        if min(depth, draws, d, h, d_ff) < 1 or d % h:
            raise ValueError(f"need positive sizes and h | d, got L={depth}, B={draws}, d={d}, h={h}, d_ff={d_ff}")
        d_k = d // h

        def draw(*shape: int, fan_in: int) -> Tensor:          # every layer's draws at once: (L, B, …)
            return torch.randn(depth, draws, *shape, generator=generator, dtype=dtype) * fan_in ** -0.5

        maybe = (lambda *shape: draw(*shape, fan_in=d)) if bias else (lambda *shape: None)
        # the order of the draws fixes the numbers: w_q, w_k, w_v, w_o, the biases, w_1, w_2
        w_q, w_k, w_v, w_o = draw(h, d, d_k, fan_in=d), draw(h, d, d_k, fan_in=d), draw(h, d, d_k, fan_in=d), \
            draw(h * d_k, d, fan_in=d)
        b_q, b_k, b_v, b_o = maybe(h, d_k), maybe(h, d_k), maybe(h, d_k), maybe(d)
        w_1, w_2 = draw(d, d_ff, fan_in=d), draw(d_ff, d, fan_in=d_ff)

        def pick(t: Tensor | None, l: int) -> Tensor | None:
            return None if t is None else t[l]

        norm = LayerNormParams(eps=eps)
        return cls(tuple(
            EncoderLayer(attention=MultiHeadWeights(w_q=w_q[l], w_k=w_k[l], w_v=w_v[l], w_o=w_o[l], b_q=pick(b_q, l),
                                                    b_k=pick(b_k, l), b_v=pick(b_v, l), b_o=pick(b_o, l)),
                         norm_1=norm, ffn=FeedForward(w_1=w_1[l], b_1=None, w_2=w_2[l], b_2=None), norm_2=norm)
            for l in range(depth)))

    def first(self, depth: int) -> "Stack":
        """The stack of the first ``depth`` layers (the same draws)."""
        return Stack(self.layers[:depth])

    def layer(self, index: int, draw: int, norm_first: bool = False) -> EncoderLayer:
        """Layer ``index`` of draw ``draw`` as one (unbatched) :class:`attnref.EncoderLayer`."""
        return replace(select(self.layers[index], draw), norm_first=norm_first)


def run(x: Tensor, stack: Stack, variant: str, final_norm: bool = False) -> list[Tensor]:
    """Apply the stack's layers in the named variant (:data:`attnref.blocks.VARIANTS`) to ``x (B, n, d)``
    with :func:`attnref.stack_layers`.

    Returns the ``L + 1`` token matrices ``[x, x_1, …, x_L]``, each ``(B, n, d)``; with
    ``final_norm`` the last one is followed by a LayerNorm (the pre-LN Transformer's final
    LayerNorm, Xiong et al. 2020) and that normalised output is appended as well.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    final = LayerNormParams(eps=stack.eps) if final_norm else None
    result = attnref.stack_layers(x, weights=list(stack.layers), variant=variant, final_norm=final)
    return list(result.trace.hidden) + ([result.output] if final_norm else [])


# --- D1: the residual followed exactly, beyond float64's round-off floor ------------------------
def _scaled(function: Callable[[Tensor], Tensor], y: Tensor, t: Tensor) -> Tensor:
    """``function(t·y)/t`` for ``function`` ∈ {expm1, log1p} (both ``x + O(x²)``): the exact
    formula while ``t`` is representable, ``y`` itself once ``t·y`` is below 1e-150 (then the
    dropped ``O(t·y)`` relative term is far below float64's precision). ``t`` broadcasts with ``y``."""
    tiny = t < 1e-150
    safe = torch.where(tiny, torch.ones_like(t), t)
    return torch.where(tiny, y, function(safe * y) / safe)


def collapse_recursion(x: Tensor, stack: Stack) -> Tensor:
    r"""``log r_l`` (natural log of :func:`relative_residual`) of a pure self-attention stack
    (:func:`attnref.multi_head_attention`, no biases) for ``l = 0, …, L``: ``x (B, n, d)`` → ``(L + 1, B)``.

    The tokens are split as :math:`X = \mathbf 1 m^\top + e^{s} \hat R` with :math:`\hat R`
    centred (:math:`\mathbf 1^\top \hat R = 0`) and of unit norm. Per head, with
    :math:`a_j = (m W_Q)(\hat r_j W_K)^\top/\sqrt{d_k}` and
    :math:`\hat c_{ij} = (\hat r_i W_Q)(\hat r_j W_K)^\top/\sqrt{d_k}`, the scores are
    :math:`e^{s} a_j + e^{2s} \hat c_{ij}` plus a term constant along each row (dropped: the softmax
    ignores it). With :math:`p = \mathrm{softmax}(e^{s} a)`, the attention matrix is
    :math:`P = \mathbf 1 p^\top + e^{2s}\hat E`,
    :math:`\hat E_{ij} = p_j\, \mathrm{expm1}\bigl(e^{2s}(\hat c_{ij} - \hat\ell_i)\bigr)/e^{2s}`,
    :math:`\hat\ell_i = \mathrm{log1p}\bigl(e^{2s}\sum_k p_k\,\mathrm{expm1}(e^{2s}\hat c_{ik})/e^{2s}\bigr)/e^{2s}`,
    and since the rows of :math:`P` sum to 1,

    .. math:: P X W_V = \mathbf 1\bigl(m W_V + e^{s} p \hat R W_V\bigr)^\top + e^{3s}\,\hat E \hat R W_V,

    whose centred part :math:`e^{3s}(I - \tfrac1n \mathbf 1\mathbf 1^\top)\hat E \hat R W_V` is the new
    residual — computed without subtracting nearly equal tokens, and with its scale kept as the
    logarithm :math:`3s + \log\lVert\cdot\rVert`. Every step is exact algebra; the only
    approximation is :func:`_scaled`'s, below float64's precision.
    """
    if stack.bias:
        raise ValueError("collapse_recursion follows attention without biases (Stack.random(bias=False))")
    mean = x.mean(dim=-2)                                             # (B, d)
    centred = x - mean[:, None]                                       # (B, n, d)
    s = torch.log(torch.linalg.matrix_norm(centred))                  # (B,)
    r_hat = centred / torch.exp(s)[:, None, None]                     # (B, n, d), unit norm
    n = x.shape[-2]
    logs = []

    def log_ratio(mean: Tensor, s: Tensor) -> Tensor:
        # ‖X‖² = n‖m‖² + e^{2s} (R ⟂ 1 mᵀ)
        return s - 0.5 * torch.logaddexp(math.log(n) + 2 * torch.log(torch.linalg.vector_norm(mean, dim=-1)), 2 * s)

    logs.append(log_ratio(mean, s))
    for index in range(stack.depth):
        w = stack.layers[index].attention                           # (B, h, d, d_k), …
        d_k = w.w_q.shape[-1]
        t = torch.exp(s)[:, None, None]                               # (B, 1, 1)
        t2 = torch.exp(2 * s)[:, None, None, None]                    # (B, 1, 1, 1)
        q_m = torch.einsum("bd,bhdk->bhk", mean, w.w_q)            # (B, h, d_k)
        q_r = torch.einsum("bnd,bhdk->bhnk", r_hat, w.w_q)         # (B, h, n, d_k)
        k_r = torch.einsum("bnd,bhdk->bhnk", r_hat, w.w_k)         # (B, h, n, d_k)
        v_m = torch.einsum("bd,bhdk->bhk", mean, w.w_v)            # (B, h, d_v)
        v_r = torch.einsum("bnd,bhdk->bhnk", r_hat, w.w_v)         # (B, h, n, d_v)
        a = torch.einsum("bhk,bhnk->bhn", q_m, k_r) / math.sqrt(d_k)  # (B, h, n): per key
        c_hat = q_r @ k_r.transpose(-1, -2) / math.sqrt(d_k)          # (B, h, n, n)
        p = torch.softmax(t * a, dim=-1)                              # (B, h, n)
        e_c = _scaled(torch.expm1, c_hat, t2)                         # expm1(c)/e^{2s}
        ell = _scaled(torch.log1p, (p[:, :, None, :] * e_c).sum(-1, keepdim=True), t2)   # (B, h, n, 1)
        e_hat = p[:, :, None, :] * _scaled(torch.expm1, c_hat - ell, t2)                 # (B, h, n, n)
        g = e_hat @ v_r                                               # (B, h, n, d_v): Ê R̂ W_V
        head_mean = v_m + t * (p[:, :, None, :] @ v_r)[:, :, 0] + t * t2[..., 0] * g.mean(-2)   # (B, h, d_v)
        head_res = g - g.mean(dim=-2, keepdim=True)                   # (I − J) Ê R̂ W_V
        mean = (head_mean.flatten(-2)[:, None] @ w.w_o)[:, 0]      # (B, 1, h·d_v) @ (B, h·d_v, d) -> (B, d)
        residual = head_res.transpose(1, 2).flatten(-2) @ w.w_o    # (B, n, d)
        norm = torch.linalg.matrix_norm(residual)                     # (B,)
        s = 3 * s + torch.log(norm)
        r_hat = residual / norm[:, None, None]
        logs.append(log_ratio(mean, s))
    return torch.stack(logs)


def skip_recursion(x: Tensor, stack: Stack, scale: float = 1.0) -> Tensor:
    r"""``log r_l`` (natural log of :func:`relative_residual`) of the stack
    :math:`X \leftarrow X + c\,\mathrm{SA}(X)` (:func:`attnref.multi_head_attention` without biases, branch
    scale ``c = scale``) for ``l = 0, …, L``: ``x (B, n, d)`` → ``(L + 1, B)``.

    As in :func:`collapse_recursion`, :math:`X = \mathbf 1 m^\top + e^{s} \hat R` with
    :math:`\hat R` centred and of unit norm. Per head the scores are, up to a term constant along
    each row (which the softmax ignores), :math:`e^{s} a_j + e^{2s} \hat c_{ij}`, so
    :math:`P = \mathrm{softmax}` of that is computed without the large common part
    :math:`m W_Q W_K^\top m^\top`; since the rows of :math:`P` sum to 1,
    :math:`P X W_V = \mathbf 1 m^\top W_V + e^{s} P \hat R W_V`, and the new residual is

    .. math:: e^{s}\bigl(\hat R + c\,(I - \tfrac1n \mathbf 1\mathbf 1^\top) \textstyle\sum_h P_h \hat R W_V^h W_O^h\bigr),

    a sum of two terms of the residual's own scale (no subtraction of nearly equal tokens). The
    scale is carried as the logarithm :math:`s`, so a residual far below float64's round-off floor
    relative to the mean token is still resolved. Every step is exact algebra.
    """
    if stack.bias:
        raise ValueError("skip_recursion follows attention without biases (Stack.random(bias=False))")
    mean = x.mean(dim=-2)                                             # (B, d)
    centred = x - mean[:, None]                                       # (B, n, d)
    s = torch.log(torch.linalg.matrix_norm(centred))                  # (B,)
    r_hat = centred / torch.exp(s)[:, None, None]                     # (B, n, d), unit norm
    n = x.shape[-2]

    def log_ratio(mean: Tensor, s: Tensor) -> Tensor:
        return s - 0.5 * torch.logaddexp(math.log(n) + 2 * torch.log(torch.linalg.vector_norm(mean, dim=-1)), 2 * s)

    logs = [log_ratio(mean, s)]
    for index in range(stack.depth):
        w = stack.layers[index].attention                           # (B, h, d, d_k), …
        d_k = w.w_q.shape[-1]
        t = torch.exp(s)[:, None, None, None]                         # (B, 1, 1, 1)
        q_m = torch.einsum("bd,bhdk->bhk", mean, w.w_q)            # (B, h, d_k)
        q_r = torch.einsum("bnd,bhdk->bhnk", r_hat, w.w_q)         # (B, h, n, d_k)
        k_r = torch.einsum("bnd,bhdk->bhnk", r_hat, w.w_k)         # (B, h, n, d_k)
        v_m = torch.einsum("bd,bhdk->bhk", mean, w.w_v)            # (B, h, d_v)
        v_r = torch.einsum("bnd,bhdk->bhnk", r_hat, w.w_v)         # (B, h, n, d_v)
        a = torch.einsum("bhk,bhnk->bhn", q_m, k_r)[:, :, None] / math.sqrt(d_k)   # (B, h, 1, n)
        c_hat = q_r @ k_r.transpose(-1, -2) / math.sqrt(d_k)          # (B, h, n, n)
        p = torch.softmax(t * a + t * t * c_hat, dim=-1)              # (B, h, n, n)
        g = p @ v_r                                                   # (B, h, n, d_v): P R̂ W_V
        head_mean = v_m + t[..., 0] * g.mean(-2)                      # (B, h, d_v)
        head_res = g - g.mean(dim=-2, keepdim=True)                   # (I − J) P R̂ W_V
        mean = mean + scale * (head_mean.flatten(-2)[:, None] @ w.w_o)[:, 0]      # (B, d)
        residual = r_hat + scale * (head_res.transpose(1, 2).flatten(-2) @ w.w_o)  # (B, n, d)
        norm = torch.linalg.matrix_norm(residual)                     # (B,)
        s = s + torch.log(norm)
        r_hat = residual / norm[:, None, None]
        logs.append(log_ratio(mean, s))
    return torch.stack(logs)


# --- D2: per-layer gradient norms -----------------------------------------------------------------
def layer_gradient_norms(x: Tensor, stack: Stack, variant: str, target: Tensor,
                         final_norm: bool = False, names: tuple[str, ...] | None = None) -> Tensor:
    r"""``‖∂ℓ/∂θ_l‖`` for every layer ``l`` and draw: the Euclidean norm of the gradient of the
    loss :math:`\ell = \tfrac12 \lVert Y - T\rVert_F^2` (per draw; ``Y`` the stack's output, after
    the final LayerNorm when ``final_norm``) with respect to all weight tensors of layer ``l``
    together (only the tensors named in ``names``, e.g. ``("attention.w_q", "attention.w_k")``,
    when given; names as :func:`attnref.layers.named_tensors` gives them).
    ``x, target (B, n, d)`` → ``(L, B)``."""
    leaves = [{k: t.detach().clone().requires_grad_() for k, t in named_tensors(layer).items()}
              for layer in stack.layers]
    if names is not None and not set(names) <= set(leaves[0]):
        raise ValueError(f"names must be among {sorted(leaves[0])}, got {names!r}")
    trainable = Stack(tuple(replace_tensors(layer, leaf) for layer, leaf in zip(stack.layers, leaves)))
    output = run(x, trainable, variant, final_norm=final_norm)[-1]                 # (B, n, d)
    loss = 0.5 * ((output - target) ** 2).sum()       # draws are independent: sum of their losses
    flat = [(l, name, t) for l, leaf in enumerate(leaves) for name, t in leaf.items()
            if names is None or name in names]
    grads = torch.autograd.grad(loss, [t for _, _, t in flat], allow_unused=True)   # unused: e.g. the FFN's
    squares = torch.zeros(stack.depth, stack.draws, dtype=x.dtype, device=x.device)
    for (l, _, _), g in zip(flat, grads):
        if g is not None:                              # a tensor the variant does not use has none
            squares[l] += g.flatten(1).pow(2).sum(-1)  # (B,): per draw
    return squares.sqrt()


# --- D3: end-to-end Jacobians ---------------------------------------------------------------------
def jacobian(function: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """The input–output Jacobian of a map batched over draws, ``(B, n, d)`` → ``(B, n, d)``, at
    ``x``: ``(B, n·d, n·d)``, row = output coordinate, column = input coordinate (token-major).

    Draw ``b``'s output depends on draw ``b``'s input only, so the Jacobian of the sum over draws
    is the stack of the per-draw Jacobians (one vectorised
    :func:`torch.autograd.functional.jacobian`)."""
    b, n, d = x.shape
    full = torch.autograd.functional.jacobian(lambda z: function(z).sum(0), x,
                                              vectorize=True)     # (n, d, B, n, d)
    return full.reshape(n * d, b, n * d).transpose(0, 1)                        # (B, n·d, n·d)
