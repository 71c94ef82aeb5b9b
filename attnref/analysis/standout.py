r"""A3, the thread's second half: do similar words "stand out" in the attention matrix?

Seed 001 says that after the products of self-attention "the dissimilar words will zero out or
become negative […] and the similar words will stand out in the resulting matrix". Chapter 6 reads
it on the A3 paraphrase pairs: both wordings of one meaning go into the encoder as one sequence
(``[CLS] a [SEP] b [SEP]``), so every token of ``a`` attends to the tokens of ``b``. For a query
token ``i`` of ``a`` and its *similar word* ``j`` in ``b`` (fixed in advance: the same word piece,
or the word piece of ``b`` with the highest cosine), :func:`counterpart_standout` scores one
attention row over the *candidates*, the word pieces of ``b``:

* ``top``: ``j`` carries strictly the largest weight of the candidates (chance: ``1 / |candidates|``);
* ``ratio``: ``A[i, j] / mean_c A[i, c]`` — above 1 when the similar word gets more than the
  average candidate.

The matrix is read as attention weights are stored: ``weights[..., query, key]``, each row a
softmax over the keys.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def _positions(name: str, value: Tensor, n: int) -> None:
    if not isinstance(value, torch.Tensor) or value.dtype not in (torch.int64, torch.int32) or value.dim() != 1:
        raise ValueError(f"{name} must be a 1-D integer tensor of positions, got "
                         f"{getattr(value, 'dtype', type(value).__name__)} {tuple(getattr(value, 'shape', ()))}")
    if value.numel() and (int(value.min()) < 0 or int(value.max()) >= n):
        raise ValueError(f"{name} holds positions outside 0..{n - 1} (sequence of {n} tokens): {value.tolist()}")


def counterpart_standout(weights: Tensor, query: Tensor, counterpart: Tensor,
                         candidates: Tensor) -> tuple[Tensor, Tensor, float]:
    """Score attention rows by the weight each query gives its similar word.

    ``weights`` ``(..., n, n)`` attention weights (rows: queries, columns: keys); ``query`` and
    ``counterpart`` ``(m,)`` positions, item ``t`` pairing query ``query[t]`` with its similar word
    ``counterpart[t]``; ``candidates`` ``(c,)`` the key positions it competes with (it must be one
    of them). Returns ``top`` ``(..., m)`` bool (the counterpart's weight is strictly the largest
    among the candidates), ``ratio`` ``(..., m)`` (its weight over the candidates' mean weight) and
    the chance of ``top`` for a row of random order, ``1 / c``.
    """
    if not isinstance(weights, torch.Tensor) or not weights.is_floating_point() or weights.dim() < 2 \
            or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights must be a floating (..., n, n) tensor of attention weights, got "
                         f"{getattr(weights, 'dtype', type(weights).__name__)} {tuple(getattr(weights, 'shape', ()))}")
    if torch.isnan(weights).any():
        raise ValueError(f"weights {tuple(weights.shape)} hold NaN")
    n = weights.shape[-1]
    for name, value in (("query", query), ("counterpart", counterpart), ("candidates", candidates)):
        _positions(name, value, n)
    if query.shape != counterpart.shape:
        raise ValueError(f"query {tuple(query.shape)} and counterpart {tuple(counterpart.shape)} must pair one to one")
    if candidates.numel() < 2:
        raise ValueError(f"candidates {tuple(candidates.shape)} must hold at least 2 key positions")
    if not torch.isin(counterpart, candidates).all():
        raise ValueError(f"every counterpart must be a candidate: {counterpart.tolist()} not all in {candidates.tolist()}")
    rows = weights[..., query, :]                                  # (..., m, n): the queries' rows
    own = rows.gather(-1, counterpart.expand(*rows.shape[:-2], -1).unsqueeze(-1)).squeeze(-1)   # (..., m)
    pool = rows[..., candidates]                                   # (..., m, c)
    others = pool.masked_fill(candidates[None, :] == counterpart[:, None], -torch.inf)   # the rest
    top = own > others.max(-1).values
    ratio = own / pool.mean(-1)
    return top, ratio, 1.0 / candidates.numel()
