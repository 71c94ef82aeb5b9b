r"""Character n-gram count models: the reference lines every text figure and table of the
confirmatory round draws (issue 43 item 2, "text budget past the counters").

An add-α model of order ``n`` predicts character :math:`c` after the :math:`n-1` characters
:math:`h` before it with

.. math:: p(c \mid h) = \frac{N(h, c) + \alpha}{N(h) + \alpha V},

where :math:`N(h, c)` counts the training positions whose context is :math:`h` and next character
:math:`c`, :math:`N(h) = \sum_c N(h, c)`, and :math:`V` is the vocabulary (the corpus's alphabet
plus its "unknown" id). **α is chosen on the training text only**: it minimises the leave-one-out
loss of the training positions (each position scored by the counts of all the others,
:math:`(N(h,c) - 1 + \alpha)/(N(h) - 1 + \alpha V)`), a closed form over the counts. The loss
reported is the mean cross-entropy (nats per character) over every validation position that has
:math:`n-1` characters before it in the validation text (:func:`validation_loss`); a validation
context never seen in training gets the uniform :math:`1/V`.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np


def _codes(ids: np.ndarray, order: int, vocab: int) -> np.ndarray:
    """The joint code (context, next) of every position i ≥ order − 1, base ``vocab``."""
    ids = np.asarray(ids, dtype=np.int64)
    if vocab ** order >= 2 ** 62:
        raise ValueError(f"order {order} with vocab {vocab} overflows the int64 codes")
    n = ids.size - order + 1
    if n <= 0:
        raise ValueError(f"a text of {ids.size} characters has no position with {order - 1} characters before it")
    code = np.zeros(n, dtype=np.int64)
    for j in range(order):
        code = code * vocab + ids[j:j + n]
    return code


class NGram:
    """Counts of one order on a training text (ids in ``range(vocab)``)."""

    def __init__(self, train_ids, order: int, vocab: int):
        if order < 1 or vocab < 2:
            raise ValueError(f"need order ≥ 1 and vocab ≥ 2, got order = {order}, vocab = {vocab}")
        ids = np.asarray(train_ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= vocab):
            raise ValueError(f"train_ids must lie in [0, {vocab}), got [{ids.min()}, {ids.max()}]")
        self.order, self.vocab = order, vocab
        self.joint, self.joint_counts = np.unique(_codes(ids, order, vocab), return_counts=True)
        # N(h): the joint counts summed per context (the joint codes are sorted, so contexts are too)
        ctx = self.joint // vocab
        starts = np.flatnonzero(np.r_[True, ctx[1:] != ctx[:-1]])
        self.context = ctx[starts]
        self.context_counts = np.add.reduceat(self.joint_counts, starts)
        self.positions = int(self.joint_counts.sum())

    def _context_count_of_joint(self) -> np.ndarray:
        return self.context_counts[np.searchsorted(self.context, self.joint // self.vocab)]

    def leave_one_out(self, alpha: float) -> float:
        """Mean leave-one-out cross-entropy (nats) of the training positions at ``alpha``."""
        n = self.joint_counts.astype(np.float64)
        big = self._context_count_of_joint().astype(np.float64)
        with np.errstate(divide="ignore"):
            logp = np.log(n - 1 + alpha) - np.log(big - 1 + alpha * self.vocab)
        return float(-(n * logp).sum() / self.positions)

    def choose_alpha(self, low: float = 1e-5, high: float = 10.0) -> float:
        """α minimising :meth:`leave_one_out` (bounded search on log α)."""
        from scipy.optimize import minimize_scalar

        found = minimize_scalar(lambda la: self.leave_one_out(math.exp(la)), bounds=(math.log(low), math.log(high)),
                                method="bounded", options={"xatol": 1e-6})
        return float(math.exp(found.x))

    def log_probabilities(self, ids, alpha: float) -> np.ndarray:
        """log p(next | context) at every position of ``ids`` with ``order − 1`` characters before it."""
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha!r}")
        code = _codes(ids, self.order, self.vocab)
        at = np.searchsorted(self.joint, code).clip(max=self.joint.size - 1)
        n = np.where(self.joint[at] == code, self.joint_counts[at], 0).astype(np.float64)
        ctx = code // self.vocab
        where = np.searchsorted(self.context, ctx).clip(max=self.context.size - 1)
        big = np.where(self.context[where] == ctx, self.context_counts[where], 0).astype(np.float64)
        return np.log(n + alpha) - np.log(big + alpha * self.vocab)

    def loss(self, ids, alpha: float) -> float:
        """Mean cross-entropy (nats per character) on ``ids``."""
        return float(-self.log_probabilities(ids, alpha).mean())


def code_hash() -> str:
    """sha256 (16 hex digits) of this module."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def baselines(corpus, orders=(1, 2, 3, 4)) -> dict:
    """Every order's add-α model on ``corpus`` (:class:`attnref.training.text.Corpus`): α chosen by
    leave-one-out on the training plays, the training leave-one-out loss, and the validation loss."""
    train = corpus.train.numpy() if hasattr(corpus.train, "numpy") else np.asarray(corpus.train)
    val = corpus.validation.numpy() if hasattr(corpus.validation, "numpy") else np.asarray(corpus.validation)
    out = {}
    for order in orders:
        model = NGram(train, order, corpus.vocab)
        alpha = model.choose_alpha()
        out[str(order)] = {"order": order, "alpha": alpha, "train_leave_one_out": model.leave_one_out(alpha),
                           "validation_loss": model.loss(val, alpha),
                           "validation_positions": int(val.size - order + 1),
                           "contexts_seen": int(model.context.size)}
    return out


def oracle_alpha(model: NGram, ids, grid=(1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0)) -> tuple[float, float]:
    """``(α, loss)``: the grid's α with the lowest loss **on ``ids`` itself** — optimistic (α fitted
    to the text it is scored on); shown only to explain figures computed that way."""
    losses = {a: model.loss(ids, a) for a in grid}
    best = min(losses, key=losses.get)
    return best, losses[best]


def write(path: Path | str, text_plan: Path | str | None = None) -> dict:
    """Compute the baselines on the text plan's split and write them with their provenance."""
    import json
    import tomllib

    from attnref.training import experiments as ex
    from attnref.training import text

    root = Path(__file__).resolve().parents[2]
    plan_file = Path(text_plan or root / "data" / "experiments" / "text" / "plan.toml")
    plays = tomllib.loads(plan_file.read_text())["corpus"]["validation_plays"]
    corpus = text.Corpus.load(plays)
    found = baselines(corpus)
    train, val = corpus.train.numpy(), corpus.validation.numpy()
    for order, entry in found.items():
        a, loss = oracle_alpha(NGram(train, int(order), corpus.vocab), val)
        entry["validation_tuned_alpha"], entry["validation_tuned_loss"] = a, loss
    data = {"what": "add-alpha character n-gram count models (attnref.training.ngram): alpha by leave-one-out on "
                    "the training plays; loss = mean next-character cross-entropy (nats/char) over every "
                    "validation position with order - 1 characters before it. validation_tuned_*: alpha "
                    "chosen on the validation text itself (optimistic, shown only to explain such figures).",
            "ngram_code_hash": code_hash(), "text_plan_sha256": ex.plan_hash(plan_file),
            "corpus_sha256": corpus.sha256, "validation_plays": list(plays), "vocab": corpus.vocab,
            "train_characters": int(train.size), "validation_characters": int(val.size),
            "orders": found}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1) + "\n")
    return data


if __name__ == "__main__":     # python -m attnref.training.ngram [OUT]
    import sys

    out = sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "data" / "experiments" / "confirmatory" / "ngram.json"
    written = write(out)
    print("; ".join(f"order {k}: {v['validation_loss']:.3f} nats/char (alpha {v['alpha']:.3g})"
                    for k, v in written["orders"].items()))
