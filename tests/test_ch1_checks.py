"""Chapter 1 (Q1–Q7): each claim's checks catch one plausible bug.

For every claim the notebook's own experiment cells (read from ``notebooks/01-nonlinearity.ipynb``,
executed here in a plain namespace, not in a kernel) run twice: on ``attnref`` as it is, where
every recorded check must pass, and with one ``attnref`` function replaced by a *mutant* — a
plausible bug — where a named check must fail and the verdict must move away from the
catalogue's. Where the issue that asked for these checks found that an older check let the bug
through (Q2's bilinearity, Q4's cubic slope, Q7's shared ranking), the test shows that this check
still passes on the mutant and that the new parity check against an explicit-loop reference
(``attnref.analysis.references``) is what catches it.

One test also mutates a derivation: Q1's sympy cell with the scores made linear in the second
token, where the check S(αX) = α² S(X) must fail.

The experiment cells of a section are the code cells after its "### Experiment" heading, minus
the plotting cells (they carry a figure caption) and the verdict cell (tagged ``remove-cell``).
The few values they take from the section's derivation (the Taylor coefficients of tanh and
softplus for Q6, the bound on GELU'''' for Q5) are supplied here, so no sympy derivation runs
except Q1's.
"""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path

import pytest
import sympy as sp
import torch

import attnref
import attnref.layers
from attnref.analysis import references as ref
from attnref.analysis import series, stats
from attnref.analysis import symbolic as sym
from attnref.book import claims, seeding

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "01-nonlinearity.ipynb"
CLAIM_IDS = ("Q1", "Q2", "Q3", "Q4", "Q5", "Q6", "Q7")


# ------------------------------------------------------------------------------------------
# Reading and running the notebook's cells
# ------------------------------------------------------------------------------------------

def _cells() -> list[dict]:
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def section_cells(claim_id: str) -> tuple[list[str], list[str]]:
    """(derivation cells, experiment cells) of a claim's section, as sources."""
    derivation, experiment, inside, part = [], [], False, None
    for cell in _cells():
        text = _source(cell)
        if cell["cell_type"] == "markdown":
            if f"(claim-{claim_id.lower()})=" in text:
                inside, part = True, derivation
            elif "(claim-q" in text:
                inside = False
            if inside and "### Experiment" in text:
                part = experiment
            continue
        if not inside:
            continue
        metadata = cell.get("metadata", {})
        if "remove-cell" in metadata.get("tags", []) or "figure" in metadata.get("mystnb", {}):
            continue                                      # the verdict cell, the plotting cells
        part.append(text)
    assert derivation and experiment, f"{NOTEBOOK.name}: no derivation or experiment cells for {claim_id}"
    return derivation, experiment


def _numerator(expr):
    return sp.fraction(sp.together(sp.expand(expr)))[0]


def namespace(claim_id: str) -> dict:
    """What the set-up cell and the section's derivation give the experiment cells."""
    evidence = claims.Evidence(claim_id)
    ns = {"math": math, "torch": torch, "sp": sp, "attnref": attnref, "claims": claims,
          "seeding": seeding, "ref": ref, "series": series, "stats": stats, "sym": sym,
          "glue": lambda *args, **kwargs: None, "numerator": _numerator,
          claim_id.lower(): evidence}
    if claim_id == "Q5":
        ns["q5_gelu_4_sup"] = 2 * math.sqrt(2 / math.pi)         # |GELU''''(0)|, its supremum
    if claim_id == "Q6":
        ns["small"] = evidence.under("both inputs small")
        ns["phi_tanh"] = [1, 0, -sp.Rational(1, 3)]
        ns["phi_softplus"] = [sp.Rational(1, 2), sp.Rational(1, 8), 0]
    return ns


@pytest.fixture(autouse=True)
def float64_default():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)            # as the notebook's set-up cell does
    yield
    torch.set_default_dtype(previous)


def run_experiment(claim_id: str) -> claims.Evidence:
    """Run the section's experiment cells; return the evidence they recorded."""
    ns = namespace(claim_id)
    for i, source in enumerate(section_cells(claim_id)[1]):
        exec(compile(source, f"<{claim_id} experiment cell {i}>", "exec"), ns)
    return ns[claim_id.lower()]


def verdict_of(evidence: claims.Evidence) -> str:
    return claims.decide(evidence.checks)


def failing(evidence: claims.Evidence) -> list[str]:
    return [c.name for c in evidence.checks if not c.passed]


def check(evidence: claims.Evidence, start: str) -> claims.Check:
    found = [c for c in evidence.checks if c.name.startswith(start)]
    assert len(found) == 1, f"{evidence.claim.id}: {len(found)} checks named {start!r}…: {[c.name for c in evidence.checks]}"
    return found[0]


# ------------------------------------------------------------------------------------------
# The mutants: one plausible bug per claim
# ------------------------------------------------------------------------------------------

def _transposed_weight(queries, keys, weight):
    """Q1: the fused weight used the wrong way round, S = X Wᵀ Xᵀ."""
    return queries @ weight.T @ keys.transpose(-2, -1)


def _fused_transposed_scaled(self, head):
    """Q2: the fused matrix transposed and with the 1/√d_k of the softmax folded in."""
    return (self.w_q[head] @ self.w_k[head].T).T / math.sqrt(self.d_k)


_SOFTMAX = attnref.softmax


def _softmax_half_temperature(logits, dim=-1):
    """Q3: a temperature of 1/2 applied by mistake."""
    return _SOFTMAX(2 * logits, dim=dim)


_LINEAR_ATTENTION = attnref.linear_attention


def _linear_attention_scaled(query, key, value):
    """Q4: the softmax-free output scaled by 1/d_k."""
    output, scores = _LINEAR_ATTENTION(query, key, value)
    d_k = query.shape[-1]
    return attnref.AttentionResult(output / d_k, scores / d_k)


def _leaky_relu(x):
    """Q5: a leaky ReLU (slope 0.01) where the FFN has a ReLU."""
    return torch.where(x >= 0, x, 0.01 * x)


def _additive_split(queries, keys, w_query, w_key, v, activation=torch.tanh):
    """Q6: the activation applied to the query term and the key term separately."""
    query_term = activation(queries @ w_query)               # (n, d_a)
    key_term = activation(keys @ w_key)                      # (m, d_a)
    return (query_term[..., :, None, :] + key_term[..., None, :, :]) @ v


_GAT = attnref.gat_scores


def _gat_swapped(nodes, weight, a, negative_slope=0.2, nonlinearity=True):
    """Q7: the node and the neighbour term swapped, e_ij = LeakyReLU(a_1ᵀW h_j + a_2ᵀW h_i)."""
    return _GAT(nodes, weight, a, negative_slope, nonlinearity).transpose(-2, -1)


MUTANTS = {
    # claim: (what is replaced, by what, the check (name prefix) that must catch it)
    "Q1": ((attnref, "luong_general_scores"), _transposed_weight, "max |attnref − torch| of the scores"),
    "Q2": ((attnref.MultiHeadWeights, "fused_bilinear"), _fused_transposed_scaled,
           "fused_bilinear vs the loop"),
    "Q3": ((attnref, "softmax"), _softmax_half_temperature, "max |attnref.softmax − torch.softmax|"),
    "Q4": ((attnref, "linear_attention"), _linear_attention_scaled, "max over α of |linear_attention − loop"),
    "Q5": ((attnref.layers.ACTIVATIONS, "relu"), _leaky_relu, "max |attnref.feed_forward − torch's FFN block| (ReLU)"),
    "Q6": ((attnref, "additive_scores"), _additive_split, "additive_scores vs the loop"),
    "Q7": ((attnref, "gat_scores"), _gat_swapped, "gat_scores (with, without LeakyReLU), gatv2_scores vs"),
}

#: Checks the issue found blind to the mutant: they must still pass on it (so the parity check
#: above is what catches the bug).
BLIND = {
    "Q2": ["bilinearity in Y and in X", "log–log slope of ‖S‖, scaling both"],
    "Q4": ["log–log slope of the softmax-free output"],
    "Q7": ["(2) GAT: node pairs", "(2) GAT on the complete graph"],
}


def apply(monkeypatch, claim_id: str) -> None:
    (target, name), mutant, _ = MUTANTS[claim_id]
    if isinstance(target, dict):
        monkeypatch.setitem(target, name, mutant)
    else:
        monkeypatch.setattr(target, name, mutant)


# ------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("claim_id", CLAIM_IDS)
def test_experiment_checks_pass_on_attnref(claim_id):
    evidence = run_experiment(claim_id)
    assert evidence.checks, f"{claim_id}: the experiment recorded no check"
    assert not failing(evidence), f"{claim_id}: checks fail on attnref: {failing(evidence)}"
    assert verdict_of(evidence) == claims.CLAIMS[claim_id].expected


@pytest.mark.parametrize("claim_id", CLAIM_IDS)
def test_a_plausible_bug_is_caught(claim_id, monkeypatch):
    apply(monkeypatch, claim_id)
    evidence = run_experiment(claim_id)
    catcher = check(evidence, MUTANTS[claim_id][2])
    assert not catcher.passed, f"{claim_id}: {catcher.name!r} passed on the mutant ({catcher.measured})"
    assert verdict_of(evidence) != claims.CLAIMS[claim_id].expected, (
        f"{claim_id}: the verdict did not move; failing checks: {failing(evidence)}")
    for start in BLIND.get(claim_id, []):
        assert check(evidence, start).passed, f"{claim_id}: {start!r} now fails on the mutant too"


def test_q6_query_only_regime_is_what_refutes_the_claim_as_stated(monkeypatch):
    """With the mutant of Q6 the query term cancels at every scale: the counterexample (slope 1
    with the keys at scale 1) is gone, and the verdict is not 'holds under conditions'."""
    apply(monkeypatch, "Q6")
    evidence = run_experiment("Q6")
    slope = check(evidence, "keys at scale 1: log–log slope")
    assert slope.bears_on == claims.COUNTEREXAMPLE and not slope.passed


Q1_SITE = "return inputs * w_q * w_k.T * inputs.T"
Q1_MUTANT = "return inputs * w_q * w_k.T * X.T"        # the second token no longer scales with the input


def test_q1_derivation_catches_scores_that_are_not_quadratic():
    derivation = section_cells("Q1")[0]
    assert len(derivation) == 1 and derivation[0].count(Q1_SITE) == 1, (
        f"the Q1 derivation cell no longer contains {Q1_SITE!r}: update tests/test_ch1_checks.py")
    ns = namespace("Q1")                       # the real cell passes in the notebook (strict nbval)
    exec(compile(derivation[0].replace(Q1_SITE, Q1_MUTANT), "<Q1 derivation, mutant>", "exec"), ns)
    assert not check(ns["q1"], "S(αX) − α² S(X) = 0").passed
    assert verdict_of(ns["q1"]) == claims.NOT_ESTABLISHED


def test_references_are_independent_of_attnref():
    """The oracles share no code with attnref: they import nothing from it."""
    source = Path(ref.__file__).read_text(encoding="utf-8")
    assert "import attnref" not in source and "from attnref" not in source
