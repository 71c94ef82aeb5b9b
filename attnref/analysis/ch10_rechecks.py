"""Chapter 10's rechecks on a trained model: what is measured and how it is recorded with the claims
engine — the functions the chapter (notebooks/10-ffn-memory.ipynb) and ``attnref audit``
(attnref/audit/recheck_ch10.py) both call, so that the page and the command cannot disagree.

* W2 — a sink two heads of one block share cancels in ``A₁ − λA₂``:
  :func:`attnref.analysis.diff_attention.sink_residual` under :data:`~attnref.analysis.diff_attention.SINK_RULE`.
* N4 — RMSNorm against LayerNorm on the residual stream: the measured gap equals
  ``√(2 − 2√(1 − ρ²))`` for every token (:mod:`attnref.analysis.norms`).

``*_measure`` return JSON-ready dicts (the audit stores them in its report); ``record_*`` record the
checks from such a dict.
"""

from __future__ import annotations

import torch

from attnref.analysis import diff_attention

Tensor = torch.Tensor


def w2_measure(sink_rows: Tensor, generator: torch.Generator | None = None) -> dict:
    """From ``sink_rows (layers, h, rows)`` — the weight of each head's rows ``t ≥ 1`` on the first
    token — the rule's residual per sink block, the sink blocks, and with ``generator`` the residual
    with the second head's rows shuffled (a seeded permutation)."""
    residual, blocks = diff_attention.sink_residual(sink_rows, sink_rows.mean((1, 2)))
    shuffled = None
    if generator is not None and len(blocks):
        permutation = torch.randperm(sink_rows.shape[-1], generator=generator)
        out = []
        for b in blocks.tolist():
            big, small = sink_rows[b].sum(-1).topk(2).indices.tolist()
            lam = sink_rows[b, small].sum() / sink_rows[b, big].sum()
            out.append((sink_rows[b, small] - lam * sink_rows[b, big][permutation]).abs().sum()
                       / sink_rows[b, small].sum())
        shuffled = torch.stack(out).tolist()
    return {"residual": residual.tolist(), "blocks": blocks.tolist(), "shuffled": shuffled,
            "layers": int(sink_rows.shape[0])}


def record_w2(evidence, m: dict, *, where: str, name: str = "") -> None:
    """W2's checks from :func:`w2_measure`'s dict: at least one sink block (supporting), the rule's
    median residual, and the shuffled rows (shown)."""
    from attnref.book import claims
    label = f"{name}: " if name else ""
    residual = torch.tensor(m["residual"], dtype=torch.float64)
    evidence.supporting.at_least(f"{label}sink blocks (mean share on the first token > ½), {where}", len(m["blocks"]), 1,
                                 kind=claims.REAL_MODEL, fails_if="no block of the model has a sink: nothing to cancel")
    evidence.at_most(f"{label}median over its {len(m['blocks'])} sink blocks of Σ|m₁ − λm₂| / Σ m₁ (top-two heads)",
                     residual.median() if len(residual) else torch.tensor(float("nan")),
                     diff_attention.SINK_RULE["residual_max"], kind=claims.REAL_MODEL,
                     fails_if="the two sink heads disagree row by row (the sink would survive the difference)")
    if m.get("shuffled"):
        evidence.demonstration.at_least(f"{label}the same with the second head's rows shuffled (median)",
                                        torch.tensor(m["shuffled"]).median(), 0.0, kind=claims.REAL_MODEL,
                                        fails_if="(shown) a shuffle cancelled as well")


def n4_formula_gap(rho: Tensor) -> Tensor:
    """``√(2 − 2√(1 − ρ²))``: the gap between RMSNorm and LayerNorm of a token with mean-to-rms ratio ρ."""
    return (2 - 2 * (1 - rho**2).clamp_min(0).sqrt()).sqrt()


def n4_measure(rho: Tensor, gap: Tensor, first: Tensor | None = None) -> dict:
    """From the measured ratios ``rho`` and gaps ``gap`` (same shape, last axis the tokens; ``first``
    marks each text's first token): the largest difference from the formula and the median gap of
    the other tokens."""
    later = gap if first is None else gap[..., ~first]
    return {"max_difference": float((gap - n4_formula_gap(rho)).abs().max()),
            "median_gap": float(later.median()), "tokens": int(gap.shape[-1])}


def record_n4(evidence, m: dict, *, where: str, name: str = "", tolerance: float = 1e-3) -> None:
    """N4's check from :func:`n4_measure`'s dict."""
    from attnref.book import claims
    label = f"{name}: " if name else ""
    evidence.at_most(f"{label}|measured gap − formula from measured ρ|, every token entering every block ({where})",
                     m["max_difference"], tolerance, kind=claims.REAL_MODEL,
                     fails_if="the stream's RMSNorm were not LN without its centring (a bias or another statistic)")
