r"""Multi-head attention, per head and packed, and conversion from/to ``torch.nn.MultiheadAttention``.

.. math::
    \mathrm{MultiHead}(X_q, X_k, X_v) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)\, W^O,
    \qquad \mathrm{head}_i = \mathrm{Attention}(X_q W_i^Q, X_k W_i^K, X_v W_i^V)

Weights are stored per head in row-vector form: ``w_q[i]`` is :math:`W_i^Q \in \mathbb{R}^{d \times d_k}`.
``torch.nn.MultiheadAttention`` stores the three projections stacked as ``(out, in)``
matrices; :meth:`MultiHeadWeights.from_torch` and :meth:`MultiHeadWeights.to_torch` transpose
and split explicitly.

**One hook for a new attention.** Both functions compute each head with one per-head attention,
the argument ``attention`` (default :func:`attnref.scaled_dot_product_attention`), a *kernel*; the
projections, the concatenation and ``W^O`` are computed here, once, for every attention. The
layers (:mod:`attnref.blocks`), the decoder's grouped-query attention (:mod:`attnref.decoder`)
and the training models take the same kernels.

**The kernel contract** (the one place it is written; :func:`kernels` lists the kernels attnref
ships, and every one of them is tested against it)::

    attention(q, k, v, *, mask=None, causal=False[, need_weights=True][, heads=None]) -> AttentionResult

* ``q (..., h', n, d_k)``, ``k (..., h', m, d_k)``, ``v (..., h', m, d_v)``: **the head axis is
  always axis −3** — all ``h`` heads at once (:func:`multi_head_attention_packed`, grouped-query
  attention with each key/value head repeated for its group) or one head, ``h' = 1``
  (:func:`multi_head_attention`, head by head).
* ``heads``: the indices of those heads in the layer, a tuple of ``h'`` ints (``(0, …, h − 1)``,
  or ``(i,)`` for head ``i``). A head-dependent kernel (ALiBi slopes, a per-head temperature)
  declares ``heads`` and reads it; it is passed only to a kernel that names it (not through
  ``**kwargs``: a wrapper that passes its keywords on to SDPA stays valid).
* ``mask``: the call's mask with ``key_mask`` folded in, broadcastable to ``(..., h', n, m)``
  (a per-head mask sliced to the kernel's heads), or ``None``; ``causal``: as given.
* ``need_weights``: ``False`` when the caller wants no weights — the kernel may then return
  ``weights=None`` (SDPA computes block by block, without the ``n × m`` weights). Passed only to a
  kernel that declares it (or ``**kwargs``); one that does not is called without it and its
  weights dropped.
* Returns an :class:`~attnref.attention.AttentionResult` with ``output (..., h', n, d_v)`` and
  ``weights (..., h', n, m)`` or ``None``; any other shape raises ``ValueError`` naming it (a kernel
  that broadcasts a per-head table over all ``h`` heads while given one is caught here).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, fields
from typing import Callable

import torch

from attnref import _validate as check
from attnref.attention import AttentionResult, scaled_dot_product_attention

Tensor = torch.Tensor

#: A per-head attention (a kernel, see the module docstring):
#: ``f(q, k, v, *, mask=None, causal=False[, need_weights=True][, heads=None]) -> AttentionResult``.
AttentionFunction = Callable[..., AttentionResult]


@dataclass(frozen=True)
class MultiHeadWeights:
    """The parameters of one multi-head attention layer, one slice per head.

    Every tensor may carry the same leading batch axes ``W`` (e.g. ``(B,)``: ``B`` independent
    layers, as chapter 7's random draws): ``w_q (*W, h, d, d_k)``, …, ``b_o (*W, d)``. Batched
    weights are applied to inputs whose batch axes broadcast with ``W`` (draw ``b`` to
    ``x[..., b, :, :]``); :attr:`batch_shape` is ``W`` (``()`` for one layer).
    """

    w_q: Tensor            # (*W, h, d, d_k): W_i^Q for every head i
    w_k: Tensor            # (*W, h, d_key_in, d_k): W_i^K (d_key_in = d in self-attention)
    w_v: Tensor            # (*W, h, d_value_in, d_v): W_i^V
    w_o: Tensor            # (*W, h·d_v, d): W^O, applied to the concatenated heads
    b_q: Tensor | None = None   # (*W, h, d_k)
    b_k: Tensor | None = None   # (*W, h, d_k)
    b_v: Tensor | None = None   # (*W, h, d_v)
    b_o: Tensor | None = None   # (*W, d)

    def __post_init__(self) -> None:
        check.floating("w_q", self.w_q, min_dim=3)
        batch = tuple(self.w_q.shape[:-3])
        for name in ("w_k", "w_v"):
            check.floating(name, getattr(self, name), exact_dim=len(batch) + 3)
        check.floating("w_o", self.w_o, exact_dim=len(batch) + 2)
        h, _, d_k = self.w_q.shape[-3:]
        d_v = self.w_v.shape[-1]
        expected = {"w_k": (h, None, d_k), "w_v": (h, None, d_v)}
        for name, (heads, _, width) in expected.items():
            tensor = getattr(self, name)
            if tuple(tensor.shape[:-3]) != batch or tensor.shape[-3] != heads or tensor.shape[-1] != width:
                leading = "".join(f"{size}, " for size in batch + (heads,))
                raise ValueError(f"{name} has shape {check.shape_of(tensor)}, expected ({leading}·, {width}) "
                                 f"to match w_q {check.shape_of(self.w_q)} and w_v {check.shape_of(self.w_v)}")
        if tuple(self.w_o.shape[:-2]) != batch or self.w_o.shape[-2] != h * d_v:
            raise ValueError(f"w_o has shape {check.shape_of(self.w_o)}, expected {batch} + (h·d_v, d) = "
                             f"{batch + (h * d_v,)} + (·,)")
        bias_shapes = {"b_q": (h, d_k), "b_k": (h, d_k), "b_v": (h, d_v), "b_o": (self.w_o.shape[-1],)}
        for name, shape in bias_shapes.items():
            bias = getattr(self, name)
            if bias is not None:
                check.floating(name, bias)
                if tuple(bias.shape) != batch + shape:
                    raise ValueError(f"{name} has shape {check.shape_of(bias)}, expected {batch + shape}")
        check.same_dtype(**{f.name: getattr(self, f.name) for f in self.__dataclass_fields__.values()})

    # --- sizes -----------------------------------------------------------------------------
    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The leading batch axes ``W`` (``()`` for one layer)."""
        return tuple(self.w_q.shape[:-3])

    @property
    def h(self) -> int:
        return self.w_q.shape[-3]

    @property
    def d(self) -> int:
        return self.w_q.shape[-2]

    @property
    def d_k(self) -> int:
        return self.w_q.shape[-1]

    @property
    def d_v(self) -> int:
        return self.w_v.shape[-1]

    @property
    def dtype(self) -> torch.dtype:
        return self.w_q.dtype

    # --- construction ----------------------------------------------------------------------
    @classmethod
    def random(cls, d: int, h: int, d_k: int | None = None, d_v: int | None = None, bias: bool = True,
               generator: torch.Generator | None = None, dtype: torch.dtype = torch.float64,
               device: torch.device | str | None = None) -> "MultiHeadWeights":
        """Weights drawn from N(0, 1/d) (biases N(0, 1/d) too); ``d_k = d_v = d / h`` by default.

        The draws come from ``generator`` on its own device (the same numbers on every device)
        and are placed on ``device`` (default: the generator's device, else torch's default).
        """
        check.positive_int("d", d)
        check.positive_int("h", h)
        for name, width in (("d_k", d_k), ("d_v", d_v)):
            if width is not None:
                check.positive_int(name, width)
        check.boolean("bias", bias)
        check.floating_dtype("dtype", dtype)
        if d_k is None or d_v is None:
            if d % h != 0:
                raise ValueError(f"d_model = {d} is not divisible by the number of heads h = {h}")
            d_k = d // h if d_k is None else d_k
            d_v = d // h if d_v is None else d_v
        std = d ** -0.5
        source = device if generator is None else generator.device

        def draw(*shape: int) -> Tensor:
            sample = torch.randn(*shape, generator=generator, dtype=dtype, device=source) * std
            return sample if device is None else sample.to(device)

        return cls(
            w_q=draw(h, d, d_k), w_k=draw(h, d, d_k), w_v=draw(h, d, d_v), w_o=draw(h * d_v, d),
            b_q=draw(h, d_k) if bias else None, b_k=draw(h, d_k) if bias else None,
            b_v=draw(h, d_v) if bias else None, b_o=draw(d) if bias else None,
        )

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "MultiHeadWeights":
        """The same weights on another device and/or in another floating dtype."""
        moved = {f.name: None if getattr(self, f.name) is None else getattr(self, f.name).to(device=device, dtype=dtype)
                 for f in fields(self)}
        return type(self)(**moved)

    @property
    def device(self) -> torch.device:
        return self.w_q.device

    @classmethod
    def from_torch(cls, module: torch.nn.MultiheadAttention) -> "MultiHeadWeights":
        """Read the weights of a ``torch.nn.MultiheadAttention`` (transposing ``(out, in)`` to row form)."""
        check.instance("module", module, torch.nn.MultiheadAttention)
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("MultiheadAttention with add_bias_kv or add_zero_attn is not supported")
        d, h = module.embed_dim, module.num_heads
        d_k = d // h
        if module._qkv_same_embed_dim:
            w_q_torch, w_k_torch, w_v_torch = module.in_proj_weight.detach().chunk(3, dim=0)  # each (d, d)
        else:
            w_q_torch = module.q_proj_weight.detach()   # (d, d)
            w_k_torch = module.k_proj_weight.detach()   # (d, kdim)
            w_v_torch = module.v_proj_weight.detach()   # (d, vdim)

        def per_head(w_out_in: Tensor) -> Tensor:
            # torch (out, in) = (h·d_k, d_in) -> row form (d_in, h·d_k) -> (d_in, h, d_k) -> (h, d_in, d_k)
            d_in = w_out_in.shape[1]
            return w_out_in.T.reshape(d_in, h, d_k).permute(1, 0, 2).clone()

        biases: dict[str, Tensor | None] = {"b_q": None, "b_k": None, "b_v": None, "b_o": None}
        if module.in_proj_bias is not None:
            b_q, b_k, b_v = module.in_proj_bias.detach().chunk(3)     # each (d,)
            biases.update(b_q=b_q.reshape(h, d_k).clone(), b_k=b_k.reshape(h, d_k).clone(),
                          b_v=b_v.reshape(h, d_k).clone())
        if module.out_proj.bias is not None:
            biases["b_o"] = module.out_proj.bias.detach().clone()
        return cls(w_q=per_head(w_q_torch), w_k=per_head(w_k_torch), w_v=per_head(w_v_torch),
                   w_o=module.out_proj.weight.detach().T.clone(),      # (d, h·d_v) -> (h·d_v, d)
                   **biases)

    def to_torch(self) -> torch.nn.MultiheadAttention:
        """A ``torch.nn.MultiheadAttention(batch_first=True)`` computing the same function."""
        if self.batch_shape:
            raise ValueError(f"to_torch converts one layer; these weights have batch axes {self.batch_shape}")
        if self.d_k != self.d_v or self.d_k * self.h != self.d or self.w_o.shape[1] != self.d:
            raise ValueError(f"torch.nn.MultiheadAttention needs d_k = d_v = d/h; got d = {self.d}, "
                             f"h = {self.h}, d_k = {self.d_k}, d_v = {self.d_v}")
        present = [b is not None for b in (self.b_q, self.b_k, self.b_v, self.b_o)]
        if any(present) and not all(present):
            raise ValueError("torch.nn.MultiheadAttention has either all four biases or none")
        kdim, vdim = self.w_k.shape[-2], self.w_v.shape[-2]
        module = torch.nn.MultiheadAttention(self.d, self.h, bias=all(present), kdim=kdim, vdim=vdim,
                                             batch_first=True, dtype=self.dtype, device=self.device)
        w_q, w_k, w_v = self.packed_projections()                 # (d_in, h·d_k) each
        with torch.no_grad():
            if module._qkv_same_embed_dim:
                module.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T], dim=0))   # (3d, d)
            else:
                module.q_proj_weight.copy_(w_q.T)
                module.k_proj_weight.copy_(w_k.T)
                module.v_proj_weight.copy_(w_v.T)
            module.out_proj.weight.copy_(self.w_o.T)                                   # (d, h·d_v)
            if all(present):
                module.in_proj_bias.copy_(torch.cat([self.b_q.reshape(-1), self.b_k.reshape(-1),
                                                     self.b_v.reshape(-1)]))
                module.out_proj.bias.copy_(self.b_o)
        return module

    def packed_projections(self) -> tuple[Tensor, Tensor, Tensor]:
        """The per-head projections side by side: ``(*W, d_in, h·d_k)``, ``(*W, d_in, h·d_k)``, ``(*W, d_in, h·d_v)``."""
        def pack(w: Tensor) -> Tensor:
            h, d_in, width = w.shape[-3:]
            # (*W, h, d_in, w) -> (*W, d_in, h, w) -> (*W, d_in, h·w)
            return w.movedim(-3, -2).reshape(*w.shape[:-3], d_in, h * width)
        return pack(self.w_q), pack(self.w_k), pack(self.w_v)

    def fused_bilinear(self, head: int) -> Tensor:
        r"""The fused score matrix of one head, :math:`W_i = W_i^Q W_i^{K\top}` (``(*W, d, d_key_in)``)."""
        return self.w_q[..., head, :, :] @ self.w_k[..., head, :, :].mT   # (d, d_k) @ (d_k, d_key_in)


def _inputs(query: Tensor, key: Tensor | None, value: Tensor | None,
            weights: MultiHeadWeights) -> tuple[Tensor, Tensor, Tensor]:
    if not isinstance(weights, MultiHeadWeights):
        raise ValueError(f"weights must be MultiHeadWeights, got {type(weights).__name__}")
    key = query if key is None else key
    value = key if value is None else value
    check.floating("query", query, min_dim=2)
    check.floating("key", key, min_dim=2)
    check.floating("value", value, min_dim=2)
    check.same_dtype(query=query, key=key, value=value, w_q=weights.w_q)
    check.dim_equal("query width must match w_q", "query", query, -1, "w_q", weights.w_q, -2)
    check.dim_equal("key width must match w_k", "key", key, -1, "w_k", weights.w_k, -2)
    check.dim_equal("value width must match w_v", "value", value, -1, "w_v", weights.w_v, -2)
    check.dim_equal("key and value must have the same length m", "key", key, -2, "value", value, -2)
    check.batch_compatible(("query", "key", "value"), (query, key, value))
    if weights.batch_shape and check.broadcast_shapes(tuple(query.shape[:-2]), weights.batch_shape) is None:
        raise ValueError(f"the batch axes of query {check.shape_of(query)} do not broadcast with the weights' "
                         f"batch axes {weights.batch_shape} (w_q {check.shape_of(weights.w_q)})")
    return query, key, value


def _mask(x_q: Tensor, x_k: Tensor, x_v: Tensor, weights: MultiHeadWeights, mask: Tensor | None,
          key_mask: Tensor | None, causal: bool) -> tuple[Tensor | None, bool]:
    """``mask`` and ``key_mask`` checked against what the caller passed, and combined.

    The batch axes of the scores are those of the inputs broadcast with the weights' batch axes
    ``W`` (batched weights give every draw its own scores, also for an unbatched input). A mask
    with one more axis than the scores ``(..., n, m)`` is per head, ``(..., h, n, m)`` (every batch
    axis spelled out, ``W`` included; size 1 broadcasts); otherwise it is shared by every head.
    Returns the combined mask and whether it is per head.

    A shared mask whose axis before ``(n, m)`` has size ``h`` and meets a batch axis of size
    ``h`` could be meant either way — one mask per head (``(h, n, m)`` with input ``(B, n, d)``,
    ``B = h``, or with ``h`` weight draws) or one per batch element — and raises ``ValueError``:
    spell it ``(1, h, n, m)`` (per head) or ``(B, 1, n, m)`` (per batch element).
    """
    check.boolean("causal", causal)
    h = weights.h
    batch = check.broadcast_shapes(*(tuple(t.shape[:-2]) for t in (x_q, x_k, x_v)), weights.batch_shape)
    n, m = x_q.shape[-2], x_k.shape[-2]
    per_head = isinstance(mask, torch.Tensor) and mask.dim() == len(batch) + 3
    if (isinstance(mask, torch.Tensor) and not per_head and h > 1 and len(batch) >= 1
            and mask.dim() == len(batch) + 2 and mask.shape[-3] == h and batch[-1] == h):
        source = (f"the weights' batch axes {weights.batch_shape}" if weights.batch_shape
                  and weights.batch_shape[-1] == h else f"query {check.shape_of(x_q)}")
        raise ValueError(
            f"mask of shape {check.shape_of(mask)} with {source} is ambiguous: its axis of "
            f"size {h} could be the h = {h} heads or the batch axis of size {batch[-1]}. Pass one mask per "
            f"head as {(1,) * len(batch) + (h, n, m)} or one per batch element as "
            f"{tuple(batch) + (1, n, m)}")
    if mask is not None:
        shape = tuple(batch) + ((h,) if per_head else ()) + (n, m)
        name = "the per-head scores' shape (..., h, n, m)" if per_head else "the scores' shape (..., n, m)"
        check.mask(mask, shape, x_q.dtype, x_q.device, shape_name=name)
    keep = None if key_mask is None else check.key_mask(key_mask, "key", x_k, tuple(batch) + (n, m))   # (..., 1, m)
    if keep is not None and per_head:
        keep = keep.unsqueeze(-3)                                                # (..., 1, 1, m)
    return check.combine_masks(mask, keep), per_head


def kernels() -> dict[str, AttentionFunction]:
    """The kernels attnref ships, by name — every one keeps the kernel contract (module docstring):
    scaled dot-product (the default), cosine (Graves et al. 2014, ``beta = 1``), sigmoid (Ramapuram
    et al. 2024), linear (no softmax, no weights), QK-norm with unit gains (:func:`attnref.qknorm.qk_norm`)
    and QK-norm attention called directly (:func:`attnref.qknorm.qk_norm_attention`)."""
    from attnref.attention import cosine_attention, linear_attention
    from attnref.qknorm import qk_norm, qk_norm_attention
    from attnref.sigmoid import sigmoid_attention
    return {"scaled_dot_product_attention": scaled_dot_product_attention, "cosine_attention": cosine_attention,
            "sigmoid_attention": sigmoid_attention, "linear_attention": linear_attention,
            "qk_norm()": qk_norm(), "qk_norm_attention": qk_norm_attention}


def _attention_function(attention: object) -> AttentionFunction:
    """The per-head attention: ``None`` is attnref's SDPA; anything else must be callable."""
    if attention is None:
        return scaled_dot_product_attention
    if not callable(attention) or isinstance(attention, (torch.Tensor, str)):
        raise ValueError(f"attention must be a function f(q, k, v, *, mask=None, causal=False) -> AttentionResult "
                         f"such as attnref.scaled_dot_product_attention, got {type(attention).__name__}")
    return attention


#: Which optional keywords of the contract a kernel declares, by its code object (shared by every
#: closure a factory such as :func:`attnref.qknorm.qk_norm` returns) or by the callable itself.
_DECLARED: dict[object, frozenset[str]] = {}


def _declared(attention: AttentionFunction) -> frozenset[str]:
    """The optional keywords of the kernel contract (``need_weights``, ``heads``) that ``attention``
    accepts: declared as parameters; ``**kwargs`` takes ``need_weights`` (``heads`` only by name)."""
    key = getattr(attention, "__code__", None) or attention
    try:
        return _DECLARED[key]
    except (KeyError, TypeError):
        pass
    try:
        parameters = inspect.signature(attention).parameters.values()
    except (TypeError, ValueError):                  # no signature to read (a builtin): pass nothing optional
        return frozenset()
    named = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    found = frozenset(p.name for p in parameters if p.name in _OPTIONAL and p.kind in named)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        found = found | {"need_weights"}         # a wrapper passing **kwargs on (to SDPA, say): heads only by name
    try:
        if len(_DECLARED) < 4096:
            _DECLARED[key] = found
    except TypeError:                                # unhashable callable: not cached
        pass
    return found


_OPTIONAL = ("need_weights", "heads")


def _attend_heads(attention: AttentionFunction, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                  causal: bool, need_weights: bool, heads: tuple[int, ...] | None = None) -> AttentionResult:
    """One call of a kernel under the contract (module docstring): ``q (..., h', n, d_k)`` with the head
    axis at −3, ``heads`` their indices (default ``0 … h' − 1``); the result checked to be an
    :class:`AttentionResult` of the contract's shapes."""
    heads = tuple(range(q.shape[-3])) if heads is None else heads
    declared = _declared(attention)
    optional = {}
    if not need_weights and "need_weights" in declared:
        optional["need_weights"] = False
    if "heads" in declared:
        optional["heads"] = heads
    result = attention(q, k, v, mask=mask, causal=causal, **optional)
    name = getattr(attention, "__name__", type(attention).__name__)
    if not isinstance(result, AttentionResult):
        raise ValueError(f"attention {name} returned {type(result).__name__}; it must return an attnref.AttentionResult")
    batch = check.broadcast_shapes(*(tuple(t.shape[:-3]) for t in (q, k, v)),
                                   *(() if mask is None else (tuple(mask.shape[:-3]),)))
    expected = tuple(batch or ()) + (len(heads), q.shape[-2], v.shape[-1])
    output = result.output
    if not isinstance(output, torch.Tensor) or tuple(output.shape) != expected:
        raise ValueError(
            f"attention {name} returned an output of shape {getattr(output, 'shape', type(output).__name__)} for "
            f"q {check.shape_of(q)} (heads {_heads_text(heads)}), expected {expected} = (..., h', n, d_v): a kernel "
            "keeps the head axis −3 of its inputs (a per-head table must be indexed by heads=, see the kernel "
            "contract in attnref.multihead)")
    weights = result.weights if need_weights else None
    if weights is not None and (not isinstance(weights, torch.Tensor)
                                or tuple(weights.shape) != expected[:-1] + (k.shape[-2],)):
        raise ValueError(f"attention {name} returned weights of shape "
                         f"{getattr(weights, 'shape', type(weights).__name__)}, expected "
                         f"{expected[:-1] + (k.shape[-2],)} = (..., h', n, m)")
    return result if weights is result.weights else result._replace(weights=None)


def _heads_text(heads: tuple[int, ...]) -> str:
    return f"({heads[0]},)" if len(heads) == 1 else f"0 … {len(heads) - 1}" if heads == tuple(range(len(heads))) \
        else str(heads)


def multi_head_attention(query: Tensor, key: Tensor | None = None, value: Tensor | None = None, *,
                         weights: MultiHeadWeights, mask: Tensor | None = None,
                         key_mask: Tensor | None = None, causal: bool = False,
                         attention: AttentionFunction | None = None, need_weights: bool = True) -> AttentionResult:
    r"""Multi-head attention computed head by head, as written in the paper.

    Args:
        query: ``(..., n, d)``; key ``(..., m, d_key_in)`` and value ``(..., m, d_value_in)``
            default to ``query`` (self-attention); value defaults to key.
        weights: the layer's :class:`MultiHeadWeights` (keyword-only, as every parameter).
        mask: boolean (True = may attend) or additive, broadcastable to ``(..., n, m)`` (shared
            by every head) or, with one more axis, ``(..., h, n, m)`` (one mask per head).
        key_mask: boolean ``(..., m)``, True for real keys, False for padding
            (torch's ``key_padding_mask`` is its negation).
        causal: query ``i`` attends keys ``j ≤ i`` only.
        attention: the per-head attention (see the module docstring), default
            :func:`attnref.scaled_dot_product_attention`.
        need_weights: ``False`` returns ``weights=None`` (and asks the attention for none).

    Returns the output ``(..., n, d)`` and the weights of every head ``(..., h, n, m)`` (``None``
    when the attention returns none).
    """
    attend = _attention_function(attention)
    check.boolean("need_weights", need_weights)
    x_q, x_k, x_v = _inputs(query, key, value, weights)
    full_mask, per_head = _mask(x_q, x_k, x_v, weights, mask, key_mask, causal)
    heads, head_weights = [], []
    for i in range(weights.h):
        q_i = x_q @ weights.w_q[..., i, :, :]     # (..., n, d) @ (*W, d, d_k) -> (..., n, d_k)
        k_i = x_k @ weights.w_k[..., i, :, :]     # (..., m, d) @ (*W, d, d_k) -> (..., m, d_k)
        v_i = x_v @ weights.w_v[..., i, :, :]     # (..., m, d) @ (*W, d, d_v) -> (..., m, d_v)
        if weights.b_q is not None:
            q_i = q_i + weights.b_q[..., i, None, :]   # (*W, 1, d_k): one bias for every token
        if weights.b_k is not None:
            k_i = k_i + weights.b_k[..., i, None, :]
        if weights.b_v is not None:
            v_i = v_i + weights.b_v[..., i, None, :]
        j = None if full_mask is None or not per_head else (0 if full_mask.shape[-3] == 1 else i)
        if attend is scaled_dot_product_attention:
            # attnref's SDPA depends on no head and no layout: the head's tensors as they are (the
            # same numbers; a size-1 axis would send float32 q kᵀ to another matmul kernel)
            mask_i = full_mask if j is None else full_mask[..., j, :, :]          # (..., n, m)
            lean = {} if need_weights else {"need_weights": False}
            head_i = scaled_dot_product_attention(q_i, k_i, v_i, mask=mask_i, causal=causal, **lean)
            heads.append(head_i.output)                                       # (..., n, d_v)
            head_weights.append(None if head_i.weights is None else head_i.weights.unsqueeze(-3))
            continue
        if full_mask is None:
            mask_i = None
        elif j is not None:            # the mask of head i, its head axis kept: (..., 1, n, m)
            mask_i = full_mask[..., j:j + 1, :, :]
        else:
            mask_i = full_mask.unsqueeze(-3)   # (..., 1, n, m)
        # the kernel contract: the head axis at −3 (here of size 1) and the head's index
        head_i = _attend_heads(attend, q_i.unsqueeze(-3), k_i.unsqueeze(-3), v_i.unsqueeze(-3), mask_i, causal,
                               need_weights, heads=(i,))
        heads.append(head_i.output.squeeze(-3))            # (..., n, d_v)
        head_weights.append(head_i.weights)                # (..., 1, n, m) or None
    concatenated = torch.cat(heads, dim=-1)    # (..., n, h·d_v)
    output = concatenated @ weights.w_o        # (..., n, h·d_v) @ (*W, h·d_v, d) -> (..., n, d)
    if weights.b_o is not None:
        output = output + weights.b_o[..., None, :]
    if not need_weights or any(w is None for w in head_weights):
        return AttentionResult(output, None)
    return AttentionResult(output, torch.cat(head_weights, dim=-3))     # weights (..., h, n, m)


def multi_head_attention_packed(query: Tensor, key: Tensor | None = None, value: Tensor | None = None, *,
                                weights: MultiHeadWeights, mask: Tensor | None = None,
                                key_mask: Tensor | None = None, causal: bool = False,
                                attention: AttentionFunction | None = None,
                                need_weights: bool = True) -> AttentionResult:
    """The same function as :func:`multi_head_attention`, with one ``d × h·d_k`` matrix per projection.

    The heads are split by a reshape, attended in one batched call of ``attention`` (its inputs
    ``(..., h, n, d_k)``; a shared mask gets a head axis of size 1) and merged by the inverse
    reshape — the way fast implementations (and torch) compute it.
    """
    attend = _attention_function(attention)
    check.boolean("need_weights", need_weights)
    x_q, x_k, x_v = _inputs(query, key, value, weights)
    full_mask, per_head = _mask(x_q, x_k, x_v, weights, mask, key_mask, causal)
    q, k, v = _split_heads(x_q, x_k, x_v, weights)   # (..., h, n or m, d_k or d_v)
    if full_mask is not None and not per_head:
        full_mask = full_mask.unsqueeze(-3)           # (..., 1, n, m): the same mask for every head
    heads = _attend_heads(attend, q, k, v, full_mask, causal, need_weights)
    merged = heads.output.transpose(-3, -2).flatten(-2)   # (..., h, n, d_v) -> (..., n, h·d_v)
    output = merged @ weights.w_o                         # (..., n, h·d_v) @ (*W, h·d_v, d) -> (..., n, d)
    if weights.b_o is not None:
        output = output + weights.b_o[..., None, :]
    return AttentionResult(output, heads.weights if need_weights else None)   # weights (..., h, n, m)


def head_projections(query: Tensor, key: Tensor | None = None, value: Tensor | None = None, *,
                     weights: MultiHeadWeights) -> tuple[Tensor, Tensor, Tensor]:
    r"""The per-head queries, keys and values, biases included: :math:`Q_i = X_q W_i^Q + b_i^Q`, ….

    Returns ``q (..., h, n, d_k)``, ``k (..., h, m, d_k)``, ``v (..., h, m, d_v)``; key and value
    inputs default to ``query`` (self-attention). These are what
    :func:`multi_head_attention_packed` attends with.
    """
    x_q, x_k, x_v = _inputs(query, key, value, weights)
    return _split_heads(x_q, x_k, x_v, weights)


def _split_heads(x_q: Tensor, x_k: Tensor, x_v: Tensor, weights: MultiHeadWeights) -> tuple[Tensor, Tensor, Tensor]:
    h, d_k, d_v = weights.h, weights.d_k, weights.d_v
    w_q, w_k, w_v = weights.packed_projections()
    q = x_q @ w_q                  # (..., n, d) @ (d, h·d_k) -> (..., n, h·d_k)
    k = x_k @ w_k                  # (..., m, d) @ (d, h·d_k) -> (..., m, h·d_k)
    v = x_v @ w_v                  # (..., m, d) @ (d, h·d_v) -> (..., m, h·d_v)
    if weights.b_q is not None:
        q = q + weights.b_q.flatten(-2)[..., None, :]   # b_i^Q of every head, side by side: (*W, 1, h·d_k)
    if weights.b_k is not None:
        k = k + weights.b_k.flatten(-2)[..., None, :]
    if weights.b_v is not None:
        v = v + weights.b_v.flatten(-2)[..., None, :]
    q = q.unflatten(-1, (h, d_k)).transpose(-3, -2)   # (..., n, h, d_k) -> (..., h, n, d_k)
    k = k.unflatten(-1, (h, d_k)).transpose(-3, -2)   # (..., h, m, d_k)
    v = v.unflatten(-1, (h, d_v)).transpose(-3, -2)   # (..., h, m, d_v)
    return q, k, v
