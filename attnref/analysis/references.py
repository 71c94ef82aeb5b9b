"""Independent references: the papers' formulas transcribed as explicit loops.

Each function computes one formula entry by entry, in plain Python floats, exactly as the paper
writes it (its own orientation of the matrices, its own concatenations), so that it shares no
code — no matrix product, no broadcasting, no reshape — with the vectorised implementation in
``attnref`` it is compared with. The notebooks use them as parity oracles where torch has no
implementation of the mechanism (or hides the quantity, like the raw scores). They are slow on
purpose: keep the sizes small.

Every name says the chapter's claim it serves (``ch1_`` for chapter 1). Inputs are torch tensors
(or nested lists); outputs are float64 tensors.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

Tensor = torch.Tensor


def _rows(x) -> list[list[float]]:
    """A 2-D tensor (or nested list) as a list of rows of Python floats."""
    rows = x.tolist() if isinstance(x, torch.Tensor) else [list(map(float, r)) for r in x]
    if not rows or not isinstance(rows[0], list):
        raise ValueError("expected a 2-D input")
    return rows


def _vector(x) -> list[float]:
    values = x.tolist() if isinstance(x, torch.Tensor) else list(map(float, x))
    if values and isinstance(values[0], list):
        raise ValueError("expected a 1-D input")
    return values


def _tensor(rows) -> Tensor:
    return torch.tensor(rows, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------
# Chapter 1 · Where the nonlinearity lives
# ---------------------------------------------------------------------------------------------

def ch1_fused_bilinear_loop(w_q, w_k) -> Tensor:
    r"""The fused score matrix of one head, :math:`W_{ab} = \sum_c (W_Q)_{ac} (W_K)_{bc}`
    (Vaswani et al., 2017: :math:`q_i \cdot k_j = x_i W_Q (x_j W_K)^\top = x_i (W_Q W_K^\top) x_j^\top`).
    ``w_q (d, d_k)``, ``w_k (d_key_in, d_k)`` → ``(d, d_key_in)``."""
    wq, wk = _rows(w_q), _rows(w_k)
    if len(wq[0]) != len(wk[0]):
        raise ValueError("w_q and w_k must have the same number of columns d_k")
    return _tensor([[sum(wq[a][c] * wk[b][c] for c in range(len(wq[0]))) for b in range(len(wk))]
                    for a in range(len(wq))])


def ch1_cross_scores_loop(queries_from, keys_from, w_q, w_k) -> Tensor:
    r"""Cross-attention scores :math:`s_{ij} = q_i \cdot k_j` with :math:`q_i = y_i W_Q` and
    :math:`k_j = x_j W_K`, every sum written out. ``queries_from (n, d)``, ``keys_from (m, d)``,
    ``w_q (d, d_k)``, ``w_k (d, d_k)`` → ``(n, m)``."""
    y, x, wq, wk = _rows(queries_from), _rows(keys_from), _rows(w_q), _rows(w_k)
    d_k = len(wq[0])
    q = [[sum(y_i[a] * wq[a][c] for a in range(len(y_i))) for c in range(d_k)] for y_i in y]
    k = [[sum(x_j[b] * wk[b][c] for b in range(len(x_j))) for c in range(d_k)] for x_j in x]
    return _tensor([[sum(q_i[c] * k_j[c] for c in range(d_k)) for k_j in k] for q_i in q])


def ch1_softmax_loop(logits) -> Tensor:
    r"""The textbook softmax :math:`p_j = e^{z_j} / \sum_l e^{z_l}`, with no maximum subtracted
    (so its shift invariance is a property of the exponential, not of the implementation).
    ``logits (n,)`` → ``(n,)``; keep the logits moderate (|z| ≲ 700)."""
    z = _vector(logits)
    exps = [math.exp(z_j) for z_j in z]
    total = sum(exps)
    return _tensor([e / total for e in exps])


def ch1_linear_attention_loop(query, key, value) -> Tensor:
    r"""Softmax-free attention :math:`y_{ic} = \sum_j \big(\sum_a q_{ia} k_{ja}\big) v_{jc}`.
    ``query (n, d_k)``, ``key (m, d_k)``, ``value (m, d_v)`` → ``(n, d_v)``."""
    q, k, v = _rows(query), _rows(key), _rows(value)
    out = []
    for q_i in q:
        scores = [sum(q_i[a] * k_j[a] for a in range(len(q_i))) for k_j in k]
        out.append([sum(scores[j] * v[j][c] for j in range(len(k))) for c in range(len(v[0]))])
    return _tensor(out)


def ch1_additive_scores_loop(queries, keys, w_a, u_a, v_a,
                             activation: Callable[[float], float] = math.tanh) -> Tensor:
    r"""Bahdanau et al. (2015), appendix A.1.2, in column form: :math:`e_{ij} = v_a^\top \tanh(W_a s_i + U_a h_j)`.

    The paper's orientation: ``w_a (d_a, d_s)``, ``u_a (d_a, d_h)``, ``v_a (d_a,)``; queries
    (decoder states) ``(n, d_s)`` and keys (encoder states) ``(m, d_h)`` as rows. The row form
    ``tanh(s W + h U) vᵀ`` of ``attnref.additive_scores`` has ``W = W_aᵀ``, ``U = U_aᵀ``.
    """
    s, h, wa, ua, va = _rows(queries), _rows(keys), _rows(w_a), _rows(u_a), _vector(v_a)
    out = []
    for s_i in s:
        row = []
        for h_j in h:
            total = 0.0
            for r in range(len(va)):                                   # one hidden unit of the MLP
                pre = sum(wa[r][b] * s_i[b] for b in range(len(s_i))) + sum(ua[r][b] * h_j[b] for b in range(len(h_j)))
                total += va[r] * activation(pre)
            row.append(total)
        out.append(row)
    return _tensor(out)


def _leaky_relu(x: float, negative_slope: float) -> float:
    return x if x >= 0 else negative_slope * x


def ch1_gat_scores_loop(nodes, weight, a, negative_slope: float = 0.2, nonlinearity: bool = True) -> Tensor:
    r"""GAT (Veličković et al., 2018, eq. 3): :math:`e_{ij} = \mathrm{LeakyReLU}\big(\mathbf a^\top [\mathbf W h_i \,\Vert\, \mathbf W h_j]\big)`.

    The paper's orientation: ``weight (F', F)`` (:math:`\mathbf W`), ``a (2F',)``, node features
    ``nodes (N, F)`` as rows; the concatenation is built entry by entry. ``nonlinearity=False``
    drops the LeakyReLU. Returns the raw scores for every pair ``(N, N)`` (mask non-edges yourself).
    """
    h, w, av = _rows(nodes), _rows(weight), _vector(a)
    if len(av) != 2 * len(w):
        raise ValueError("a must have 2F' entries")
    projected = [[sum(w[f][b] * h_i[b] for b in range(len(h_i))) for f in range(len(w))] for h_i in h]   # W h_i
    out = []
    for i in range(len(h)):
        row = []
        for j in range(len(h)):
            concatenated = projected[i] + projected[j]                  # [W h_i ‖ W h_j]: 2F' entries
            score = sum(av[f] * concatenated[f] for f in range(len(av)))
            row.append(_leaky_relu(score, negative_slope) if nonlinearity else score)
        out.append(row)
    return _tensor(out)


def ch1_gatv2_scores_loop(nodes, weight, a, negative_slope: float = 0.2) -> Tensor:
    r"""GATv2's scoring function (Brody et al., 2022): :math:`e_{ij} = \mathbf a^\top \mathrm{LeakyReLU}\big(\mathbf W [h_i \,\Vert\, h_j]\big)`.

    The paper's orientation: ``weight (F', 2F)`` (:math:`\mathbf W`), ``a (F',)``, node features
    ``nodes (N, F)`` as rows. Returns ``(N, N)``.
    """
    h, w, av = _rows(nodes), _rows(weight), _vector(a)
    out = []
    for i in range(len(h)):
        row = []
        for j in range(len(h)):
            concatenated = h[i] + h[j]                                   # [h_i ‖ h_j]: 2F entries
            hidden = [sum(w[f][b] * concatenated[b] for b in range(len(concatenated))) for f in range(len(w))]
            row.append(sum(av[f] * _leaky_relu(hidden[f], negative_slope) for f in range(len(av))))
        out.append(row)
    return _tensor(out)
