"""Single-head attention in all the forms the claims talk about.

Shapes use the letters of the package docstring: query ``(..., n, d_k)``, key
``(..., m, d_k)``, value ``(..., m, d_v)``, scores and weights ``(..., n, m)``. Every attention
takes the same masks (``mask``, ``key_mask``, ``causal``; see :func:`combined_mask`) and returns
an :class:`AttentionResult`.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch

from attnref import _validate as check
from attnref import blockwise

Tensor = torch.Tensor


class AttentionResult(NamedTuple):
    """What every attention function and every layer returns; read the fields by name.

    * ``output``: ``(..., n, d_v)`` (a layer's ``(..., n, d)``).
    * ``weights``: the normalised attention weights, ``(..., n, m)`` (per head ``(..., h, n, m)``);
      every row sums to 1, or is all zero for a fully masked query. ``None`` where nothing is
      normalised (:func:`linear_attention`).
    * ``scores``: the scores before normalisation and before any mask, where the function has
      them to give (:func:`linear_attention`: the raw products ``q_i·k_j``); else ``None``.
    * ``trace``: a layer's or block's intermediates (its own named tuple); ``None`` for attention.
    """

    output: Tensor
    weights: Tensor | None
    scores: Tensor | None = None
    trace: object | None = None


def softmax(logits: Tensor, dim: int = -1) -> Tensor:
    r"""Numerically stable softmax :math:`p_j = e^{z_j - \max z} / \sum_l e^{z_l - \max z}`.

    Subtracting the row maximum changes nothing mathematically (softmax is invariant to adding
    a constant to every logit) and keeps every exponent ≤ 0, so logits as large as ±1e300 give
    finite weights.

    ``-inf`` logits mean "masked": they get weight 0. A row whose logits are all ``-inf`` (a
    fully masked query) gets all-zero weights — not NaN — so that its attention output is the
    zero vector. An empty row (no key at all, ``m = 0``) is the same case: its softmax is the
    empty vector and its attention output the zero vector. ``+inf`` and NaN are rejected, and
    ``dim`` must be an int axis of ``logits``.

    Half precision: float16 and bfloat16 logits are exponentiated and normalised in float32 and
    the weights rounded once to the input's dtype (as transformers' Llama and x-transformers
    do, and as torch's CPU softmax does); float32 and float64 are computed in their own dtype.
    A meta tensor (shape only) gives a meta result of the same shape.
    """
    check.floating("logits", logits, min_dim=1, allow_inf=True)
    dim = check.axis("dim", dim, logits, "logits")
    if check.any_true(torch.isposinf(logits)):
        raise ValueError(f"logits contain +inf (shape {check.shape_of(logits)}); only -inf (masked) is allowed")
    return _softmax(logits, dim)


def _reusable(temporary: Tensor) -> bool:
    """Whether a tensor this module created may be overwritten by the next step of the formula.

    Speed only: at n = m = 512 every fresh ``(n, m)`` tensor costs about as much as the ``exp``
    (the memory is new to the process each time), so the score functions compute the scale, the
    mask, the shift, the ``exp`` and the division in place — the same operations, the same bits.
    Not when autograd records the computation: it needs the intermediate values."""
    return not (temporary.requires_grad and torch.is_grad_enabled())


def _softmax(logits: Tensor, dim: int, *, overwrite: bool = False) -> Tensor:
    """:func:`softmax` of checked logits (finite or ``-inf``), half precision computed in float32.

    ``overwrite=True``: ``logits`` is a temporary of the caller's, reused for the result when
    :func:`_reusable` (never a caller's tensor from outside attnref)."""
    if logits.dtype in check.HALF_PRECISION:
        return _softmax(logits.float(), dim, overwrite=True).to(logits.dtype)   # float32 statistics, one rounding
    if logits.shape[dim] == 0:
        return logits * 1.0                                       # m = 0: the empty distribution
    in_place = overwrite and _reusable(logits)
    # A fully masked row has max -inf; shift it by 0 instead so that no -inf - -inf = NaN appears
    # (nan_to_num is where(isfinite(max), max, 0) in one operation, its gradient too).
    row_max = torch.nan_to_num(logits.amax(dim=dim, keepdim=True), nan=0.0, posinf=0.0, neginf=0.0)
    shifted = logits.sub_(row_max) if in_place else logits - row_max   # every entry ≤ 0 (or -inf)
    exps = shifted.exp_() if in_place else torch.exp(shifted)
    # ≥ 1 (the row's largest entry gives e^0 = 1) unless the row is fully masked (0): 0 becomes 1
    normaliser = exps.sum(dim=dim, keepdim=True).clamp_min(1.0)
    return exps.div_(normaliser) if in_place else exps / normaliser


def _upcast(*tensors: Tensor | None) -> tuple[Tensor | None, ...]:
    """The tensors in attnref's working dtype: float32 for float16/bfloat16 (see :func:`softmax`)."""
    return tuple(t if t is None or t.dtype not in check.HALF_PRECISION else t.float() for t in tensors)


def _finite_scores(scores: Tensor, what: str | Callable[[], str]) -> Tensor:
    """Scores that overflowed (±inf, or NaN from inf − inf) name the inputs that made them.

    One sum proves the common case (see :func:`attnref._validate.all_finite`); only a non-finite
    sum looks at the elements. ``what`` may be a function that builds the description: it is
    called only when raising. A value check: skipped with :func:`attnref.checks` off."""
    if check.has_values(scores) and not check.all_finite(scores) and not bool(torch.isfinite(scores).all()):
        what = what() if callable(what) else what
        raise ValueError(f"{what} overflow {scores.dtype} to ±inf (scores of shape {check.shape_of(scores)}): "
                         "the inputs are too large for this dtype")
    return scores


def _softmax_of_masked(scores: Tensor, full_mask: Tensor | None, what: str, *,
                       overwrite: bool = False, causal: bool = False, window: int | None = None) -> Tensor:
    """``softmax(mask(scores))`` for finite scores; an additive mask that overflows them is named.

    ``overwrite=True``: ``scores`` is the caller's temporary (see :func:`_softmax`)."""
    masked = _masked(scores, full_mask, overwrite=overwrite, causal=causal, window=window)
    if (full_mask is not None and full_mask.dtype != torch.bool and check.has_values(masked)
            and masked.numel() > 0 and bool(masked.amax() == float("inf"))):
        raise ValueError(f"{what} plus the additive mask overflow {scores.dtype} to +inf "
                         f"(scores of shape {check.shape_of(scores)})")
    return _softmax(masked, dim=-1, overwrite=overwrite or masked is not scores)


def scores_shape(query: Tensor, key: Tensor) -> tuple[int, ...]:
    """The shape ``(..., n, m)`` of the scores of ``query (..., n, ·)`` against ``key (..., m, ·)``."""
    batch = check.broadcast_shapes(tuple(query.shape[:-2]), tuple(key.shape[:-2]))
    return tuple(batch) + (query.shape[-2], key.shape[-2])


def combined_mask(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
                  mask: Tensor | None = None, key_mask: Tensor | None = None, causal: bool = False,
                  keys_name: str = "key", keys: Tensor | None = None) -> Tensor | None:
    """Check ``mask``, ``key_mask`` and ``causal`` against scores of ``shape`` and combine them.

    The one meaning of the masks, for every attention in attnref:

    * ``mask``: boolean (True = may attend) or additive (added to the scores, ``-inf`` removes),
      broadcastable to the scores ``(..., n, m)`` — per-head masks are ``(..., h, n, m)``;
    * ``key_mask``: boolean with the key positions (the keys' shape without the width),
      True for a real key, False for padding (torch's ``key_padding_mask`` is its negation);
    * ``causal``: query ``i`` keeps key ``j`` only when ``j ≤ i`` (top-left aligned, as torch's
      ``is_causal``).

    Returns one boolean or additive mask broadcastable to ``shape``, or ``None``. (attnref's own
    attentions do not build the ``(n, m)`` causal mask: they take :func:`_content_mask` and remove
    the hidden pairs in place, a block of rows at a time.)
    """
    keep = _content_mask(shape, dtype, device, mask, key_mask, causal, keys_name, keys)
    if causal:
        n, m = shape[-2], shape[-1]
        lower = torch.ones(n, m, dtype=torch.bool, device=device).tril()             # (n, m): j ≤ i
        keep = lower if keep is None else check.combine_masks(keep, lower)
    return keep


def _content_mask(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
                  mask: Tensor | None = None, key_mask: Tensor | None = None, causal: bool = False,
                  keys_name: str = "key", keys: Tensor | None = None, window: int | None = None) -> Tensor | None:
    """:func:`combined_mask` without the causal part: ``mask`` and ``key_mask`` checked and combined
    (``causal`` and ``window`` only checked; :func:`_hide_structure` applies them)."""
    check.boolean("causal", causal)
    if window is not None:
        check.positive_int("window", window)
    if mask is not None:
        check.mask(mask, shape, dtype, device)
    keep = None if key_mask is None else check.key_mask(key_mask, keys_name, keys)   # (..., 1, m)
    if keep is not None and check.broadcast_shapes(tuple(keep.shape), tuple(shape)) != tuple(shape):
        raise ValueError(f"key_mask of shape {check.shape_of(key_mask)} does not broadcast to the scores' "
                         f"shape (..., n, m) = {tuple(shape)}")
    return check.combine_masks(mask, keep)


#: Rows of the scores whose causal/window mask is built at once: at most this many booleans (256 KiB).
STRUCTURE_CHUNK = 2 ** 18


#: Causal/window masks of at most this many booleans are kept, by shape, for the next call (a few
#: KiB each; building one costs more than applying it at the sizes of a per-call measurement).
SMALL_STRUCTURE = 2 ** 14
_small_structures: dict[tuple, Tensor] = {}


def _hide_structure(scores: Tensor, causal: bool, window: int | None) -> Tensor:
    """``scores`` (attnref's own temporary) with the pairs hidden by ``causal`` (``j > i``) or a
    sliding ``window`` (``j ≤ i − window``) set to ``-inf`` in place, a block of rows at a time:
    no ``(n, m)`` mask is built (below :data:`SMALL_STRUCTURE` pairs the mask is built once per shape)."""
    if not causal and window is None:
        return scores
    n, m = scores.shape[-2], scores.shape[-1]
    if n * m <= SMALL_STRUCTURE:
        key = (n, m, bool(causal), window, scores.device)
        hidden = _small_structures.get(key)
        if hidden is None:
            hidden = blockwise.hidden_mask((0, n), (0, m), causal, window, scores.device)   # (n, m)
            if len(_small_structures) < 256:
                _small_structures[key] = hidden
        return scores.masked_fill_(hidden, float("-inf"))
    rows = max(1, STRUCTURE_CHUNK // max(1, m))
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        hidden = blockwise.hidden_mask((r0, r1), (0, m), causal, window, scores.device)   # (rows, m)
        scores[..., r0:r1, :].masked_fill_(hidden, float("-inf"))
    return scores


def _masked(scores: Tensor, full_mask: Tensor | None, *, overwrite: bool = False, causal: bool = False,
            window: int | None = None) -> Tensor:
    """Scores with removed positions at ``-inf`` (boolean mask) or the additive mask added; then the
    pairs hidden by ``causal`` or ``window`` at ``-inf`` (in a tensor of attnref's own)."""
    if full_mask is None:
        masked = scores
    else:
        in_place = (overwrite and _reusable(scores)
                    and check.broadcast_shapes(tuple(full_mask.shape), tuple(scores.shape)) == tuple(scores.shape))
        if full_mask.dtype == torch.bool:
            masked = (scores.masked_fill_(~full_mask, float("-inf")) if in_place
                      else scores.masked_fill(~full_mask, float("-inf")))
        else:
            masked = scores.add_(full_mask) if in_place else scores + full_mask
    if not causal and window is None:
        return masked
    if masked is scores and not overwrite:
        masked = scores.clone()                   # never write into the caller's tensor
    return _hide_structure(masked, causal, window)


def attention_from_scores(scores: Tensor, value: Tensor, *, mask: Tensor | None = None,
                          key_mask: Tensor | None = None, causal: bool = False) -> AttentionResult:
    r"""``softmax(mask(S)) V`` for any score matrix ``S`` (additive, cosine, GAT, …).

    :math:`\alpha_{ij} = \mathrm{softmax}_j(s_{ij})`, :math:`y_i = \sum_j \alpha_{ij} v_j`.
    ``scores (..., n, m)``, ``value (..., m, d_v)``; ``key_mask`` has the shape ``(..., m)`` of
    the value positions. float16/bfloat16 inputs: softmax and ``@ value`` in float32, results
    rounded to the input dtype (see :func:`softmax`).
    """
    check.floating("scores", scores, min_dim=2)
    check.floating("value", value, min_dim=2)
    check.same_dtype(scores=scores, value=value)
    check.dim_equal("scores and value must cover the same keys", "scores", scores, -1, "value", value, -2)
    check.batch_compatible(("scores", "value"), (scores, value))
    full_mask = _content_mask(tuple(scores.shape), scores.dtype, scores.device, mask, key_mask, causal,
                              "value", value)
    return _attend(scores, value, full_mask, "scores", causal=causal)


def _attend(scores: Tensor, value: Tensor, full_mask: Tensor | None, what: str, *,
            overwrite: bool = False, causal: bool = False) -> AttentionResult:
    """``softmax(mask(scores)) @ value`` of finite scores, in the working dtype, rounded to ``value``'s.

    ``overwrite=True``: ``scores`` is the caller's temporary (see :func:`_softmax`)."""
    dtype = value.dtype
    scores, value = _upcast(scores, value)
    weights = _softmax_of_masked(scores, full_mask, what, overwrite=overwrite, causal=causal)   # (..., n, m)
    output = weights @ value              # (..., n, m) @ (..., m, d_v) -> (..., n, d_v)
    return AttentionResult(output.to(dtype), weights.to(dtype))


def _check_qkv(query: Tensor, key: Tensor, value: Tensor) -> None:
    check.floating("query", query, min_dim=2)
    check.floating("key", key, min_dim=2)
    check.floating("value", value, min_dim=2)
    check.same_dtype(query=query, key=key, value=value)
    check.dim_equal("query and key must have the same width d_k", "query", query, -1, "key", key, -1)
    check.dim_equal("key and value must have the same length m", "key", key, -2, "value", value, -2)
    check.batch_compatible(("query", "key", "value"), (query, key, value))


def _check_query_key(query: Tensor, key: Tensor) -> None:
    check.floating("query", query, min_dim=2)
    check.floating("key", key, min_dim=2)
    check.same_dtype(query=query, key=key)
    check.dim_equal("query and key must have the same width", "query", query, -1, "key", key, -1)
    check.batch_compatible(("query", "key"), (query, key))


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, *,
                                 mask: Tensor | None = None, key_mask: Tensor | None = None,
                                 causal: bool = False, scale: float | None = None, window: int | None = None,
                                 need_weights: bool = True) -> AttentionResult:
    r"""Scaled dot-product attention of Vaswani et al. (2017), eq. 1.

    .. math:: \mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V

    Args:
        query: ``(..., n, d_k)``; key: ``(..., m, d_k)``; value: ``(..., m, d_v)``.
        mask: boolean (True = may attend) or additive, broadcastable to ``(..., n, m)``.
        causal: keep only keys ``j ≤ i`` (combined with ``mask`` if both are given).
        scale: factor on the scores, default ``1/√d_k`` (``d_k = 0`` then raises ``ValueError``).
        key_mask: boolean ``(..., m)``, False for padding keys.
        window: sliding-window causal attention: query ``i`` sees key ``j`` iff
            ``i − window < j ≤ i`` (a positive int; it implies ``causal``). ``None``: no window.
        need_weights: ``True`` (default) returns the ``(..., n, m)`` weights; ``False`` returns
            ``weights=None`` and computes the output block by block with the online softmax
            (:mod:`attnref.blockwise`, claim F1): memory ``O(n · block)`` instead of ``O(n · m)``,
            and blocks that the causal or window mask hides entirely are skipped.

    Returns the output ``(..., n, d_v)`` and the weights ``(..., n, m)``. Empty in, empty out:
    ``n = 0`` gives empty results; ``m = 0`` (no key) gives ``(..., n, 0)`` weights and a zero
    output, like a fully masked query.

    Half precision: for float16/bfloat16 inputs the scores, the softmax and ``@ V`` are computed
    in float32 (scores beyond 65504 are fine) and the output and weights rounded to the input
    dtype. Scores that overflow the working dtype raise ``ValueError`` naming query and key (the
    blockwise path bounds the products and the scores by ``max‖q_i‖ · max‖k_j‖`` and that times
    ``|scale|``, norms in float64, and, unless both are below half the dtype's largest number,
    computes the one matrix, which checks every score).
    """
    _check_qkv(query, key, value)
    check.boolean("need_weights", need_weights)
    d_k = query.shape[-1]
    if scale is None and d_k == 0:
        raise ValueError(f"query {check.shape_of(query)} and key {check.shape_of(key)} have width d_k = 0: "
                         "the default scale 1/√d_k is undefined (pass scale=...)")
    if scale is not None:
        scale = check.real_number("scale", scale)
    if mask is None and key_mask is None:            # nothing to combine: only the settings to check
        check.boolean("causal", causal)
        if window is not None:
            check.positive_int("window", window)
        full_mask = None
    else:
        full_mask = _content_mask(scores_shape(query, key), query.dtype, query.device, mask, key_mask, causal,
                                  "key", key, window)
    scale = 1.0 / math.sqrt(d_k) if scale is None else scale
    dtype = query.dtype
    half = dtype in check.HALF_PRECISION
    if half:
        query, key, value = _upcast(query, key, value)   # float16/bfloat16 -> float32
    if not need_weights and _blockwise_applies(query, key, full_mask, scale):
        output = blockwise.blockwise_attention(query, key, value, scale=scale, mask=full_mask, causal=causal,
                                               window=window)   # (..., n, d_v), no (n, m) tensor
        return AttentionResult(output.to(dtype) if half else output, None)
    scores = query @ key.transpose(-2, -1)   # (..., n, d_k) @ (..., d_k, m) -> (..., n, m)
    scores = scores.mul_(scale) if _reusable(scores) else scores * scale   # divide by √d_k
    _finite_scores(scores, lambda: f"the scores query @ keyᵀ · scale (query {check.shape_of(query)}, "
                                   f"key {check.shape_of(key)}, scale = {float(scale):.4g})")   # built on failure only
    weights = _softmax_of_masked(scores, full_mask, "the scores query @ keyᵀ · scale", overwrite=True,
                                 causal=causal, window=window)   # (..., n, m), in the scores' memory
    output = weights @ value                 # (..., n, m) @ (..., m, d_v) -> (..., n, d_v)
    if not half:
        return AttentionResult(output, weights if need_weights else None)
    return AttentionResult(output.to(dtype), weights.to(dtype) if need_weights else None)


def _blockwise_applies(query: Tensor, key: Tensor, full_mask: Tensor | None, scale: float | Tensor) -> bool:
    """Whether the blockwise path may compute this attention: values to compute with (not a meta
    tensor, not a tensor that ``torch.func`` transforms — ``vmap``, ``grad`` — wrap: the loop writes
    into its tiles in place), no gradient wanted for an additive mask or a tensor scale (the blockwise
    gradient covers query, key and value), and — while the value checks are on — nothing it computes
    can overflow: the products ``q_i · k_j`` and the scores ``(q_i · k_j) · scale``, bounded by
    ``max‖q_i‖ · max‖k_j‖`` and that times ``|scale|`` (Cauchy–Schwarz), each below half the
    dtype's largest number (room for the round-off of the sums). Otherwise the one-matrix path
    computes the same attention and checks every score (``ValueError`` when one overflows)."""
    if query.device.type == "meta" or _functorch_wrapped(query, key):
        return False
    if full_mask is not None and full_mask.requires_grad:
        return False
    if isinstance(scale, torch.Tensor) and scale.requires_grad:
        return False
    if not check.values_checked() or query.numel() == 0 or key.numel() == 0:
        return True
    with torch.no_grad():
        largest_q, largest_k = _largest_row_norms(query, key)
    products = largest_q * largest_k                               # Python floats: float64, inf on overflow
    limit = torch.finfo(query.dtype).max / 2
    return products < limit and products * abs(float(scale)) < limit   # False for inf and NaN too


def _functorch_wrapped(*tensors: Tensor) -> bool:
    """Whether a ``torch.func`` transform (``vmap``, ``grad``, ``jacrev`` …) wraps any of the tensors."""
    wrapped = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", None)
    return wrapped is not None and any(wrapped(t) for t in tensors)


#: Below this (float64) a norm's squares may have lost digits to underflow: recomputed rescaled.
_TINY_NORM = 1e-140


def _largest_row_norms(query: Tensor, key: Tensor) -> tuple[float, float]:
    """``max_i ‖q_i‖`` and ``max_j ‖k_j‖`` computed in float64 (one host synchronisation). float32
    entries cannot overflow or underflow there when squared; float64 rows whose norm is not finite
    or below :data:`_TINY_NORM` are recomputed as ``s ‖x/s‖`` with ``s = max |x_a|``."""
    norms = torch.stack([torch.linalg.vector_norm(x, dim=-1, dtype=torch.float64).amax() for x in (query, key)])
    largest = norms.tolist()
    for index, x in enumerate((query, key)):
        if x.dtype == torch.float64 and not (_TINY_NORM <= largest[index] < math.inf):
            spread = float(x.abs().amax())
            if spread > 0 and math.isfinite(spread):
                largest[index] = spread * float(torch.linalg.vector_norm(x / spread, dim=-1).amax())
    return largest[0], largest[1]


def luong_dot_scores(query: Tensor, key: Tensor) -> Tensor:
    r"""Luong et al. (2015) "dot" score :math:`e_{ij} = s_i \cdot h_j`; ``(..., n, m)``.

    float16/bfloat16 inputs: computed in float32, returned in the input dtype (as every score
    function here; a score beyond the dtype's range is returned as ±inf).
    """
    _check_query_key(query, key)
    dtype = query.dtype
    query, key = _upcast(query, key)
    return (query @ key.transpose(-2, -1)).to(dtype)     # (..., n, d) @ (..., d, m) -> (..., n, m)


def luong_general_scores(query: Tensor, key: Tensor, *, weight: Tensor) -> Tensor:
    r"""Luong et al. (2015) "general" score :math:`e_{ij} = s_i^\top W h_j` (row form ``S W Hᵀ``).

    ``query (..., n, d_s)``, ``key (..., m, d_h)``, ``weight (d_s, d_h)``.
    """
    check.floating("query", query, min_dim=2)
    check.floating("key", key, min_dim=2)
    check.floating("weight", weight, exact_dim=2)
    check.same_dtype(query=query, key=key, weight=weight)
    check.dim_equal("weight rows must match the query width", "query", query, -1, "weight", weight, 0)
    check.dim_equal("weight columns must match the key width", "key", key, -1, "weight", weight, 1)
    check.batch_compatible(("query", "key"), (query, key))
    dtype = query.dtype
    query, key, weight = _upcast(query, key, weight)
    projected = query @ weight                   # (..., n, d_s) @ (d_s, d_h) -> (..., n, d_h)
    return (projected @ key.transpose(-2, -1)).to(dtype)   # (..., n, d_h) @ (..., d_h, m) -> (..., n, m)


def additive_scores(query: Tensor, key: Tensor, *, w_query: Tensor, w_key: Tensor, v: Tensor,
                    activation: Callable[[Tensor], Tensor] = torch.tanh) -> Tensor:
    r"""Additive (Bahdanau et al., 2015) score :math:`e_{ij} = v^\top \tanh(W s_i + U h_j)`.

    Row form: ``query (..., n, d_s)``, ``key (..., m, d_h)``, ``w_query (d_s, d_a)``,
    ``w_key (d_h, d_a)``, ``v (d_a,)``. ``activation`` replaces tanh (e.g. the identity, to
    study the linearised score): a callable from tensor to tensor of the same shape (a name
    such as ``"tanh"`` raises ``ValueError``).
    """
    check.floating("query", query, min_dim=2)
    check.floating("key", key, min_dim=2)
    check.floating("w_query", w_query, exact_dim=2)
    check.floating("w_key", w_key, exact_dim=2)
    check.floating("v", v, exact_dim=1)
    check.same_dtype(query=query, key=key, w_query=w_query, w_key=w_key, v=v)
    check.dim_equal("w_query rows must match the query width", "query", query, -1, "w_query", w_query, 0)
    check.dim_equal("w_key rows must match the key width", "key", key, -1, "w_key", w_key, 0)
    check.dim_equal("w_query and w_key must map to the same width d_a", "w_query", w_query, 1, "w_key", w_key, 1)
    check.dim_equal("v must have the width d_a", "w_key", w_key, 1, "v", v, 0)
    check.batch_compatible(("query", "key"), (query, key))
    if not callable(activation) or isinstance(activation, torch.Tensor):
        raise ValueError(f"activation must be a callable such as torch.tanh, got {activation!r} "
                         f"({type(activation).__name__})")
    dtype = query.dtype
    query, key, w_query, w_key, v = _upcast(query, key, w_query, w_key, v)
    query_term = query @ w_query                                # (..., n, d_s) @ (d_s, d_a) -> (..., n, d_a)
    key_term = key @ w_key                                      # (..., m, d_h) @ (d_h, d_a) -> (..., m, d_a)
    summed = query_term[..., :, None, :] + key_term[..., None, :, :]   # (..., n, m, d_a)
    activated = activation(summed)                              # (..., n, m, d_a)
    if not isinstance(activated, torch.Tensor) or activated.shape != summed.shape:
        raise ValueError(f"activation must map a tensor of shape {check.shape_of(summed)} to one of the same "
                         f"shape, got {getattr(activated, 'shape', type(activated).__name__)}")
    return (activated @ v).to(dtype)                            # (..., n, m, d_a) @ (d_a,) -> (..., n, m)


def _row_norms(x: Tensor) -> Tensor:
    r"""Euclidean norms of the rows, ``(..., rows, 1)``, without overflow or underflow.

    ``‖x‖`` squares the entries: beyond about 1e154 (float64) the squares overflow and below
    1e-154 they underflow. Rows whose plain norm is inf or below :math:`\sqrt{\text{tiny}/\varepsilon}`
    are recomputed as :math:`s\,\lVert x/s\rVert` with :math:`s = \max_a |x_a|` (entries in
    ``[-1, 1]``); every other row keeps the plain norm bit for bit.
    """
    norms = x.norm(dim=-1, keepdim=True)                       # (..., rows, 1)
    info = torch.finfo(x.dtype)
    # below sqrt(tiny/eps) subnormal squares could cost more than round-off; above it the plain
    # norm is as accurate as the rescaled one, and kept bit for bit
    suspect = ~torch.isfinite(norms) | (norms < math.sqrt(info.tiny / info.eps))
    if check.values_checked() and not check.any_true(suspect):   # one sync saves the rescaled pass
        return norms
    spread = x.abs().amax(dim=-1, keepdim=True)                 # s: (..., rows, 1)
    safe = torch.where(spread > 0, spread, torch.ones_like(spread))
    rescaled = spread * (x / safe).norm(dim=-1, keepdim=True)  # s ‖x/s‖, 0 for a zero row
    return torch.where(suspect, rescaled, norms)


def _unit_rows(name: str, x: Tensor, allowed_zero: Tensor | None = None) -> Tensor:
    """Rows divided by their norms; a zero row raises unless ``allowed_zero`` (``(..., rows)``) marks
    it (it then stays zero: a key that ``key_mask`` removes)."""
    norms = _row_norms(x)                                       # (..., rows, 1)
    zero = norms == 0
    refused = zero if allowed_zero is None else zero & ~allowed_zero[..., None]
    if check.any_true(refused):
        raise ValueError(f"{name} of shape {check.shape_of(x)} has a zero row (every entry exactly 0): "
                         "its cosine is undefined")
    return x / torch.where(zero, torch.ones_like(norms), norms)


def cosine_scores(query: Tensor, key: Tensor) -> Tensor:
    r"""Cosine (content-based) score :math:`\cos(q_i, k_j) = q_i\cdot k_j / (\lVert q_i\rVert \lVert k_j\rVert)`.

    ``query (..., n, d)``, ``key (..., m, d)`` → ``(..., n, m)`` with entries in ``[-1, 1]``.
    A zero row has no direction: it raises ``ValueError``. Norms are computed without overflow
    or underflow, so rows of any finite size (1e300 or 1e-300) have their cosine.
    """
    _check_query_key(query, key)
    return _cosine(query, key).to(query.dtype)


def _cosine(query: Tensor, key: Tensor, key_allowed_zero: Tensor | None = None) -> Tensor:
    """Cosine scores in the working dtype (float32 for half precision)."""
    query, key = _upcast(query, key)
    unit_q = _unit_rows("query", query)
    unit_k = _unit_rows("key", key, key_allowed_zero)
    return unit_q @ unit_k.transpose(-2, -1)      # (..., n, d) @ (..., d, m) -> (..., n, m)


def cosine_attention(query: Tensor, key: Tensor, value: Tensor, *, mask: Tensor | None = None,
                     key_mask: Tensor | None = None, causal: bool = False,
                     beta: float | Tensor = 1.0, need_weights: bool = True) -> AttentionResult:
    r"""Content-based addressing (Graves et al., 2014): :math:`\alpha_{ij} = \mathrm{softmax}_j(\beta \cos(q_i, k_j))`.

    ``beta`` is the key strength (an inverse temperature): a real number, or a tensor of
    shape ``(..., n, 1)`` (broadcastable with the scores) giving one strength per query.
    Masks as in :func:`scaled_dot_product_attention`. A zero key has no cosine: it raises
    ``ValueError`` unless ``key_mask`` removes it (then it gets weight 0). ``need_weights=False``
    returns ``weights=None`` (the kernel contract of :mod:`attnref.multihead`).
    """
    _check_qkv(query, key, value)
    check.boolean("need_weights", need_weights)
    beta = check.strength("beta", beta, scores_shape(query, key), query.dtype, query.device)
    removed = None if key_mask is None else ~check.key_mask(key_mask, "key", key)[..., 0, :]   # (..., m)
    scores = _cosine(query, key, removed)         # (..., n, m) in [-1, 1], zero keys only where removed
    scores = beta * scores                        # β sharpens or flattens
    _finite_scores(scores, lambda: f"beta times the cosine scores (beta of type {type(beta).__name__})")
    full_mask = _content_mask(tuple(scores.shape), query.dtype, query.device, mask, key_mask, causal, "key", key)
    result = _attend(scores, value, full_mask, "beta times the cosine scores", overwrite=True, causal=causal)
    return result if need_weights else result._replace(weights=None)


def parameter_free_self_attention(x: Tensor, *, mask: Tensor | None = None, key_mask: Tensor | None = None,
                                  causal: bool = False) -> AttentionResult:
    r"""The basic self-attention with no parameters: :math:`y_i = \sum_j \mathrm{softmax}_j(x_i\cdot x_j)\, x_j`.

    ``x (..., n, d)`` is the query, the key and the value; no projection and no scaling.
    Masks as in :func:`scaled_dot_product_attention` (``key_mask (..., n)``), half precision too.
    """
    check.floating("x", x, min_dim=2)
    full_mask = _content_mask(tuple(x.shape[:-1]) + (x.shape[-2],), x.dtype, x.device, mask, key_mask,
                              causal, "x", x)
    dtype = x.dtype
    (x,) = _upcast(x)
    scores = x @ x.transpose(-2, -1)              # (..., n, d) @ (..., d, n) -> (..., n, n)
    _finite_scores(scores, lambda: f"the scores x @ xᵀ (x {check.shape_of(x)})")
    weights = _softmax_of_masked(scores, full_mask, "the scores x @ xᵀ", overwrite=True, causal=causal)
    output = weights @ x                          # (..., n, n) @ (..., n, d) -> (..., n, d)
    return AttentionResult(output.to(dtype), weights.to(dtype))


def linear_attention(query: Tensor, key: Tensor, value: Tensor, *, mask: Tensor | None = None,
                     key_mask: Tensor | None = None, causal: bool = False, need_weights: bool = True) -> AttentionResult:
    r"""Attention with the softmax removed (the "bra-ket" form): :math:`y_i = \sum_j (q_i\cdot k_j)\, v_j`.

    Equivalently :math:`Y = (Q K^\top) V = Q (K^\top V)`: the operator
    :math:`\sum_j |v_j\rangle\langle k_j|` applied to each query. Nothing is normalised, so the
    result's ``weights`` are ``None`` and its ``scores`` hold the raw products ``Q Kᵀ`` (before any
    mask). Masks (boolean only: there is no softmax for an additive mask to act in) remove pairs
    ``(i, j)`` from the sum: their coefficient is set to 0.
    float16/bfloat16: scores and ``@ V`` in float32, results in the input dtype. ``need_weights`` is
    accepted for the kernel contract of :mod:`attnref.multihead` (there are no weights either way).
    """
    _check_qkv(query, key, value)
    check.boolean("need_weights", need_weights)
    if mask is not None and isinstance(mask, torch.Tensor) and mask.dtype != torch.bool:
        raise ValueError(f"linear_attention takes boolean masks only (True = may attend), got mask "
                         f"{mask.dtype} with shape {check.shape_of(mask)}")
    full_mask = combined_mask(scores_shape(query, key), query.dtype, query.device, mask, key_mask, causal,
                              "key", key)
    dtype = query.dtype
    query, key, value = _upcast(query, key, value)
    scores = query @ key.transpose(-2, -1)        # (..., n, d_k) @ (..., d_k, m) -> (..., n, m)
    coefficients = scores if full_mask is None else scores.masked_fill(~full_mask, 0.0)   # removed pairs: 0
    output = coefficients @ value                 # (..., n, m) @ (..., m, d_v) -> (..., n, d_v)
    return AttentionResult(output.to(dtype), None, scores=scores.to(dtype))


def _leaky_relu(x: Tensor, negative_slope: float) -> Tensor:
    return torch.where(x >= 0, x, negative_slope * x)


def gat_scores(nodes: Tensor, *, weight: Tensor, a: Tensor, negative_slope: float = 0.2,
               nonlinearity: bool = True) -> Tensor:
    r"""GAT scores (Veličković et al., 2018): :math:`e_{ij} = \mathrm{LeakyReLU}(a^\top [W h_i \,\Vert\, W h_j])`.

    Row form: ``nodes (..., N, d_in)``, ``weight (d_in, d')``, ``a (2 d',)``. Splitting
    ``a = [a_1; a_2]`` gives :math:`e_{ij} = \mathrm{LeakyReLU}(a_1^\top W h_i + a_2^\top W h_j)`.
    ``negative_slope`` is a finite real; ``nonlinearity`` a bool (``False`` drops the LeakyReLU).
    Mask non-edges with :func:`attention_from_scores`.
    """
    check.floating("nodes", nodes, min_dim=2)
    check.floating("weight", weight, exact_dim=2)
    check.floating("a", a, exact_dim=1)
    check.same_dtype(nodes=nodes, weight=weight, a=a)
    check.dim_equal("weight rows must match the node width", "nodes", nodes, -1, "weight", weight, 0)
    if a.shape[0] != 2 * weight.shape[1]:
        raise ValueError(f"a must have 2·d' = {2 * weight.shape[1]} entries for weight {check.shape_of(weight)}, "
                         f"got shape {check.shape_of(a)}")
    negative_slope = check.real_number("negative_slope", negative_slope)
    check.boolean("nonlinearity", nonlinearity)
    d_out = weight.shape[1]
    dtype = nodes.dtype
    nodes, weight, a = _upcast(nodes, weight, a)
    z = nodes @ weight                            # (..., N, d_in) @ (d_in, d') -> (..., N, d')
    target_term = z @ a[:d_out]                   # a_1ᵀ W h_i: (..., N)
    source_term = z @ a[d_out:]                   # a_2ᵀ W h_j: (..., N)
    raw = target_term[..., :, None] + source_term[..., None, :]   # (..., N, N)
    return (_leaky_relu(raw, negative_slope) if nonlinearity else raw).to(dtype)


def gatv2_scores(nodes: Tensor, *, weight: Tensor, a: Tensor, negative_slope: float = 0.2) -> Tensor:
    r"""GATv2 scores (Brody et al., 2022): :math:`e_{ij} = a^\top \mathrm{LeakyReLU}(W [h_i \,\Vert\, h_j])`.

    Row form: ``nodes (..., N, d_in)``, ``weight (2 d_in, d')``, ``a (d',)``. The nonlinearity
    sits between ``W`` and ``a``, so the ranking of neighbours can depend on the node ``i``.
    """
    check.floating("nodes", nodes, min_dim=2)
    check.floating("weight", weight, exact_dim=2)
    check.floating("a", a, exact_dim=1)
    check.same_dtype(nodes=nodes, weight=weight, a=a)
    d_in = nodes.shape[-1]
    if weight.shape[0] != 2 * d_in:
        raise ValueError(f"weight must have 2·d_in = {2 * d_in} rows for nodes {check.shape_of(nodes)}, "
                         f"got shape {check.shape_of(weight)}")
    check.dim_equal("a must have the width d'", "weight", weight, 1, "a", a, 0)
    negative_slope = check.real_number("negative_slope", negative_slope)
    dtype = nodes.dtype
    nodes, weight, a = _upcast(nodes, weight, a)
    target_term = nodes @ weight[:d_in]           # (..., N, d_in) @ (d_in, d') -> (..., N, d')
    source_term = nodes @ weight[d_in:]           # (..., N, d_in) @ (d_in, d') -> (..., N, d')
    summed = target_term[..., :, None, :] + source_term[..., None, :, :]   # (..., N, N, d')
    return (_leaky_relu(summed, negative_slope) @ a).to(dtype)          # (..., N, N)
