"""``attnref audit``'s rechecks of chapter 10 (registered through :func:`attnref.audit.rechecks.register`):

* W2 — does a sink that two heads of one block share cancel in ``A₁ − λA₂``? Measured on the audit's
  long text (each head's rows ``t ≥ 1``: their weight on the first token).
* N4 — RMSNorm against LayerNorm on the residual stream entering each block of the long text.

What is measured and how it is recorded are the chapter's own functions
(:mod:`attnref.analysis.ch10_rechecks`).
"""

from __future__ import annotations

import torch

from attnref.analysis import ch10_rechecks, norms
from attnref.audit import rechecks


def _run(model, long_ids):
    if long_ids is None or len(long_ids) < 2:
        return None
    with torch.no_grad():
        return model.run(long_ids)


def measure_w2(model, sums, long_ids, paths):
    run = _run(model, long_ids)
    if run is None:
        return None
    sink = torch.stack([w.double()[:, 1:, 0] for w in run.weights])           # (L, h, n − 1)
    return {**ch10_rechecks.w2_measure(sink), "tokens": len(long_ids)}


def record_w2(evidence, m):
    ch10_rechecks.record_w2(evidence, m["W2"], where=f"the audit's text of {m['W2']['tokens']} tokens")


def measure_n4(model, sums, long_ids, paths):
    run = _run(model, long_ids)
    if run is None:
        return None
    stream = run.hidden[:-1]                                                   # each block's input
    rho = torch.stack([norms.mean_to_rms(x.double()) for x in stream])        # (L, n)
    gap = torch.stack([norms.centring_gap(x.float(), eps=0.0).double() for x in stream])
    first = torch.arange(rho.shape[-1]) == 0
    return ch10_rechecks.n4_measure(rho, gap, first)


def record_n4(evidence, m):
    ch10_rechecks.record_n4(evidence, m["N4"], where=f"the audit's text of {m['N4']['tokens']} tokens")


rechecks.register("W2", measure_w2, record_w2)
rechecks.register("N4", measure_n4, record_n4)
