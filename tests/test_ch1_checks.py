"""Chapter 1's checks can fail: for every claim Q1–Q7, plausible bugs injected into ``attnref``
move the claim's verdict away from the expected one, and the check that catches each is named.

Each test runs the set-up cell and the code cells of one claim section of
``notebooks/01-nonlinearity.ipynb`` — the notebook's own derivation and experiment cells, not a
copy of them (``tests/notebook_sections.py``; plotting cells and the verdict cell are skipped,
``glue`` is a no-op) — with one ``attnref`` function monkeypatched to a mutant, and decides the
verdict from the recorded evidence with ``claims.decide``. One test mutates the notebook's own
sympy source instead (Q1's scores made linear in the second token).

The NaN tests put a NaN into what an ``attnref`` function returns: no check may pass on it (a
Python ``max(acc, err)`` would drop a NaN arriving second; the cells take the max of a tensor).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import attnref
import attnref.attention
import attnref.layers
import attnref.multihead
from attnref.book import claims

import notebook_sections                     # tests/notebook_sections.py
from notebook_sections import assert_caught

NOTEBOOK = "01-nonlinearity.ipynb"
CLAIM_IDS = [f"Q{i}" for i in range(1, 9)]


def run_section(claim_id: str, replace: tuple[str, str] | None = None, namespace: dict | None = None):
    """Run one claim section (optionally with one source mutation); return its verdict and checks."""
    return notebook_sections.run_section(NOTEBOOK, CLAIM_IDS, claim_id, replace, namespace)


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("ATTNREF_FIGURES", "off")
    yield


def failing(checks) -> list[str]:
    return [c.name for c in checks if not c.passed]


# ------------------------------------------------------------------------------------------
# On attnref as it is: every check passes, with a role that means what it says
# ------------------------------------------------------------------------------------------

STATED_PARITY = ("eq-q1-bias: torch's biased scores", "max |autograd Jacobian − (diag(p) − p pᵀ)|")


@pytest.mark.parametrize("claim_id", CLAIM_IDS)
def test_every_check_passes_on_attnref_and_names_what_it_rules_out(claim_id):
    verdict, checks = run_section(claim_id)
    assert not failing(checks), f"{claim_id}: checks fail on attnref: {failing(checks)}"
    assert verdict == claims.CLAIMS[claim_id].expected
    assert all(c.fails_if for c in checks), [c.name for c in checks if not c.fails_if]
    # a parity against torch or a loop supports the claim; it never proves or refutes it —
    # except where the claim itself is the compared formula (eq-q1-bias, Q3's Jacobian)
    for c in checks:
        if c.kind == claims.PARITY and not c.name.startswith(STATED_PARITY):
            assert c.bears_on == claims.SUPPORTING, f"{claim_id}: parity {c.name!r} is {c.bears_on}"


# ------------------------------------------------------------------------------------------
# Mutants of attnref
# ------------------------------------------------------------------------------------------

_REAL_SOFTMAX = attnref.attention._softmax


def _softmax_without_max_shift(logits, dim, *, overwrite=False):
    """The textbook exp(z) / Σ exp(z): overflows (inf / inf = NaN) for large logits."""
    exps = torch.exp(logits)
    return exps / exps.sum(dim=dim, keepdim=True)


def _softmax_with_temperature(logits, dim, *, overwrite=False):
    return _REAL_SOFTMAX(2 * logits, dim)


_REAL_SDPA = attnref.multihead.scaled_dot_product_attention


def _mha_scaled_by_model_width(real):
    """multi_head_attention dividing the scores by √d (the model width), not √d_k."""
    def mutant(query, key=None, value=None, **kwargs):
        d = query.shape[-1]

        def sdpa(q, k, v, *, mask=None, causal=False, scale=None):
            return _REAL_SDPA(q, k, v, mask=mask, causal=causal, scale=1 / math.sqrt(d))

        attnref.multihead.scaled_dot_product_attention = sdpa
        try:
            return real(query, key=key, value=value, **kwargs)
        finally:
            attnref.multihead.scaled_dot_product_attention = _REAL_SDPA
    return mutant


def _sdpa_scaled_by_value_width(query, key, value, *, mask=None, key_mask=None, causal=False, scale=None):
    """The default scale taken from the value width, 1/√d_v, instead of the key width 1/√d_k."""
    if scale is None:
        scale = 1 / math.sqrt(value.shape[-1])
    return _REAL_SDPA(query, key, value, mask=mask, key_mask=key_mask, causal=causal, scale=scale)


def _with_sdpa_scaled_by_value_width(monkeypatch):
    for module in (attnref, attnref.attention, attnref.multihead):
        monkeypatch.setattr(module, "scaled_dot_product_attention", _sdpa_scaled_by_value_width)


def test_the_scale_mutant_is_a_real_bug_only_when_d_v_differs_from_d_k(monkeypatch):
    gen = torch.Generator().manual_seed(6)
    q, k = torch.randn(5, 4, generator=gen, dtype=torch.float64), torch.randn(7, 4, generator=gen, dtype=torch.float64)
    v_same, v_other = (torch.randn(7, w, generator=gen, dtype=torch.float64) for w in (4, 3))
    for v, differs in ((v_same, False), (v_other, True)):
        reference = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        gap = (_sdpa_scaled_by_value_width(q, k, v).output - reference).abs().max().item()
        assert (gap > 1e-6) is differs, (v.shape, gap)


def test_q4_catches_a_default_scale_from_d_v(monkeypatch):
    # issue 38, item 6: with d_k = d_v in every head chapter 1 passed completely with this bug
    _with_sdpa_scaled_by_value_width(monkeypatch)
    verdict, checks = run_section("Q4")
    assert_caught("Q4", verdict, checks, "max over α of |attnref − torch| of the softmax output")


def test_q2_catches_a_default_scale_from_d_v(monkeypatch):
    _with_sdpa_scaled_by_value_width(monkeypatch)
    verdict, checks = run_section("Q2")
    assert_caught("Q2", verdict, checks, "d_k = 4 ≠ d_v = 3: max |attnref − torch SDPA per head")
    # torch's MultiheadAttention (d_k = d_v) alone could not see it
    assert "max |attnref − torch| of the cross-attention output and weights (h = 2)" not in failing(checks)


def test_q1_catches_a_transposed_fused_weight(monkeypatch):
    real = attnref.luong_general_scores
    monkeypatch.setattr(attnref, "luong_general_scores", lambda q, k, *, weight: real(q, k, weight=weight.T))
    verdict, checks = run_section("Q1")
    assert_caught("Q1", verdict, checks, "max |attnref − torch| of the scores")


def test_q1_derivation_catches_scores_that_are_not_quadratic():
    verdict, checks = run_section("Q1", ("return inputs * w_q * w_k.T * inputs.T",
                                         "return inputs * w_q * w_k.T * X.T"))
    assert_caught("Q1", verdict, checks, "S(αX) − α² S(X) = 0 (sympy)")


def test_q2_catches_one_over_root_d_instead_of_root_d_k(monkeypatch):
    # With h = 1 (the old parity) d = d_k and this bug passed; with h = 2 it cannot.
    monkeypatch.setattr(attnref, "multi_head_attention", _mha_scaled_by_model_width(attnref.multi_head_attention))
    verdict, checks = run_section("Q2")
    assert_caught("Q2", verdict, checks, "cross-attention output and weights (h = 2)")


def test_q2_catches_a_transposed_fused_matrix(monkeypatch):
    real = attnref.MultiHeadWeights.fused_bilinear
    monkeypatch.setattr(attnref.MultiHeadWeights, "fused_bilinear", lambda self, head: real(self, head).T)
    verdict, checks = run_section("Q2")
    assert_caught("Q2", verdict, checks, "fused_bilinear vs the loop")


def test_q3_catches_a_softmax_without_max_shift(monkeypatch):
    monkeypatch.setattr(attnref.attention, "_softmax", _softmax_without_max_shift)
    verdict, checks = run_section("Q3")
    assert_caught("Q3", verdict, checks, "attnref.softmax(z ± 1000)")


def test_q3_catches_a_temperature(monkeypatch):
    monkeypatch.setattr(attnref.attention, "_softmax", _softmax_with_temperature)
    verdict, checks = run_section("Q3")
    assert_caught("Q3", verdict, checks, "max |attnref.softmax − torch.softmax|")


def test_q4_catches_a_softmax_without_max_shift(monkeypatch):
    # The symptom: the outputs were NaN at α = 10³ and the parity recorded 6.67e-16.
    monkeypatch.setattr(attnref.attention, "_softmax", _softmax_without_max_shift)
    verdict, checks = run_section("Q4")
    assert_caught("Q4", verdict, checks, "max over α of |attnref − torch| of the softmax output")
    parity = next(c for c in checks if c.name.startswith("max over α of |attnref − torch|"))
    assert parity.measured == "NaN"


def test_q4_catches_a_scaled_softmax_free_output(monkeypatch):
    real = attnref.linear_attention

    def scaled(query, key, value, **kwargs):
        result = real(query, key, value, **kwargs)
        return result._replace(output=result.output / query.shape[-1])

    monkeypatch.setattr(attnref, "linear_attention", scaled)
    verdict, checks = run_section("Q4")
    assert_caught("Q4", verdict, checks, "max over α of |linear_attention − loop")


def test_q5_catches_a_leaky_relu(monkeypatch):
    monkeypatch.setitem(attnref.layers.ACTIVATIONS, "relu", lambda x: torch.where(x >= 0, x, 0.01 * x))
    verdict, checks = run_section("Q5")
    assert_caught("Q5", verdict, checks, "torch's FFN block| (ReLU)")


def test_q5_catches_a_dropped_output_bias(monkeypatch):
    real = attnref.feed_forward
    monkeypatch.setattr(attnref, "feed_forward", lambda x, ffn: real(x, dataclasses.replace(ffn, b_2=None)))
    verdict, checks = run_section("Q5")
    assert_caught("Q5", verdict, checks, "torch's FFN block| (ReLU)")


def test_q6_catches_the_activation_applied_to_each_term(monkeypatch):
    def split(query, key, w_query, w_key, v, activation=torch.tanh):
        query_term = activation(query @ w_query)                 # (n, d_a)
        key_term = activation(key @ w_key)                       # (m, d_a)
        return (query_term[..., :, None, :] + key_term[..., None, :, :]) @ v

    monkeypatch.setattr(attnref, "additive_scores", split)
    verdict, checks = run_section("Q6")
    assert_caught("Q6", verdict, checks, "additive_scores vs the loop")
    # the query term now cancels at every scale: the counterexample is gone too
    assert "keys at scale 1: log–log slope of the query dependence" in failing(checks)


def test_q6_catches_swapped_query_and_key_weights(monkeypatch):
    real = attnref.additive_scores
    monkeypatch.setattr(attnref, "additive_scores",
                        lambda q, k, *, w_query, w_key, v, activation=torch.tanh: real(
                            q, k, w_query=w_key, w_key=w_query, v=v, activation=activation))
    verdict, checks = run_section("Q6")
    assert_caught("Q6", verdict, checks, "additive_scores vs the loop")


def test_q7_catches_the_halves_of_a_swapped(monkeypatch):
    real = attnref.gat_scores

    def swapped(nodes, *, weight, a, negative_slope=0.2, nonlinearity=True):
        half = a.shape[0] // 2
        return real(nodes, weight=weight, a=torch.cat([a[half:], a[:half]]), negative_slope=negative_slope,
                    nonlinearity=nonlinearity)

    monkeypatch.setattr(attnref, "gat_scores", swapped)
    verdict, checks = run_section("Q7")
    assert_caught("Q7", verdict, checks, "gat_scores (with, without LeakyReLU), gatv2_scores vs")


def test_q7_catches_a_leaky_relu_slope_that_ignores_its_argument(monkeypatch):
    monkeypatch.setattr(attnref.attention, "_leaky_relu", lambda x, negative_slope: torch.where(x >= 0, x, 0.01 * x))
    verdict, checks = run_section("Q7")
    assert_caught("Q7", verdict, checks, "gat_scores (with, without LeakyReLU), gatv2_scores vs")
    assert "(3) the GATv2 example through attnref: max |e − exact|" in failing(checks)


def test_q8_catches_normalised_sigmoid_weights(monkeypatch):
    """A 'sigmoid attention' that divides each row by its sum is softmax-like: Q8's parity with
    torch's formula fails, and so does the counterexample (b = 0 rows no longer grow with m)."""
    real = attnref.sigmoid_attention

    def normalised(query, key, value, **kwargs):
        result = real(query, key, value, **kwargs)
        weights = result.weights / result.weights.sum(-1, keepdim=True).clamp(min=1e-300)
        return result._replace(output=weights @ value, weights=weights)

    monkeypatch.setattr(attnref, "sigmoid_attention", normalised)
    verdict, checks = run_section("Q8")
    assert_caught("Q8", verdict, checks, "sigmoid_attention vs torch.sigmoid")
    assert any(name.startswith("b = 0: smallest row sum") for name in failing(checks))


@pytest.mark.parametrize("wrong_bias", [lambda m: -0.5 * math.log(m), lambda m: 0.0, lambda m: -2 * math.log(m)],
                         ids=["half log m", "no bias", "twice log m"])
def test_q8_catches_a_default_bias_other_than_minus_log_m(monkeypatch, wrong_bias):
    real = attnref.sigmoid_attention

    def biased(query, key, value, *, bias=None, **kwargs):
        return real(query, key, value, bias=wrong_bias(key.shape[-2]) if bias is None else bias, **kwargs)

    monkeypatch.setattr(attnref, "sigmoid_attention", biased)
    verdict, checks = run_section("Q8")
    assert_caught("Q8", verdict, checks, "eq-q8-tuned: row sums vs")


def test_q8_catches_a_mask_that_leaves_a_small_weight(monkeypatch):
    real = attnref.sigmoid_attention

    def leaky(query, key, value, *, mask=None, key_mask=None, causal=False, **kwargs):
        if not causal:
            return real(query, key, value, mask=mask, key_mask=key_mask, **kwargs)
        n, m = query.shape[-2], key.shape[-2]
        additive = torch.zeros(n, m, dtype=query.dtype).masked_fill(~torch.ones(n, m, dtype=torch.bool).tril(), -40.0)
        return real(query, key, value, mask=additive, key_mask=key_mask, **kwargs)   # σ(z − 40) > 0

    monkeypatch.setattr(attnref, "sigmoid_attention", leaky)
    verdict, checks = run_section("Q8")
    assert_caught("Q8", verdict, checks, "causal mask: every removed weight exactly 0")


# ------------------------------------------------------------------------------------------
# NaN never passes
# ------------------------------------------------------------------------------------------

NAN_SITES = {
    # claim: (module, function, field of an AttentionResult, a check that must fail)
    "Q1": (attnref, "luong_general_scores", None, "max |attnref − torch| of the scores"),
    "Q2": (attnref, "multi_head_attention", "weights", "cross-attention output and weights (h = 2)"),
    "Q3": (attnref, "softmax", None, "max |attnref.softmax − torch.softmax|"),
    "Q4": (attnref, "linear_attention", "output", "max over α of |linear_attention − loop"),
    "Q5": (attnref, "feed_forward", None, "torch's FFN block| (ReLU)"),
    # attnref.softmax refuses NaN logits (ValueError), so Q6's NaN enters through the weights
    "Q6": (attnref, "softmax", None, "tanh: log–log slope of the query dependence"),
    "Q7": (attnref, "attention_from_scores", "weights", "weights over the neighbours"),
    "Q8": (attnref, "sigmoid_attention", "weights", "eq-q8-tuned: row sums vs"),
}


@pytest.mark.parametrize("claim_id", CLAIM_IDS)
def test_a_nan_from_attnref_moves_the_verdict(claim_id, monkeypatch):
    module, name, field, catcher = NAN_SITES[claim_id]
    monkeypatch.setattr(module, name, notebook_sections.with_nan(getattr(module, name), field))
    verdict, checks = run_section(claim_id)
    assert_caught(claim_id, verdict, checks, catcher)


def test_q7_nan_weights_fail_the_gap_checks_too(monkeypatch):
    # The symptom: two Q7 checks passed on NaN weights (Python max dropped the NaN).
    monkeypatch.setattr(attnref, "attention_from_scores",
                        notebook_sections.with_nan(attnref.attention_from_scores, "weights"))
    verdict, checks = run_section("Q7")
    assert {"(1) without LeakyReLU: largest gap of renormalised weights of two nodes",
            "(2) GAT: largest gap of renormalised weights (the node term matters)"} <= set(failing(checks))


# --- issue 44 item 2: each elementwise function under its own condition; m-free checks that bite ---

@pytest.mark.parametrize("factor", [0.8, 1.2])
def test_q8_the_m_free_checks_catch_a_bias_of_the_wrong_strength(monkeypatch, factor):
    """b = −0.8 log m and −1.2 log m kept every row sum within [σ(−B), e^B] up to m = 4096: the bound
    checks alone passed them (round 5). The derived identity is switched to the same bias so that only
    the m-free checks can catch it: the log–log slope of the mean row sum (±0.2) does."""
    real = attnref.sigmoid_attention

    def biased(query, key, value, *, bias=None, **kwargs):
        return real(query, key, value, bias=-factor * math.log(key.shape[-2]) if bias is None else bias, **kwargs)

    monkeypatch.setattr(attnref, "sigmoid_attention", biased)
    verdict, checks = run_section("Q8", ("derived = (z_scores.exp() / (m + z_scores.exp())).sum(-1)",
                                         f"derived = (z_scores.exp() / (m ** {factor} + z_scores.exp())).sum(-1)"))
    bounds = [c for c in checks if c.name.startswith("eq-q8-bounds: largest") or c.name.startswith("eq-q8-bounds: smallest")]
    assert len(bounds) == 2 and all(c.passed for c in bounds)      # what round 5 found: the bounds miss it
    assert_caught("Q8", verdict, checks, "m-free: log–log slope of the mean row sum")


def test_q8_judges_tanh_and_relu_each_under_its_own_condition():
    """Q8's conditions name each function with its own normaliser (b = −log m is the sigmoid's only),
    and the sigmoid's bias applied to tanh and ReLU is recorded as a counterexample that holds."""
    verdict, checks = run_section("Q8")
    assert verdict == claims.CONDITIONS
    assert claims.conditions_of(checks) == ["sigmoid with a bias chosen for the length, b = −log m",
                                            "tanh with a 1/m normaliser, w = tanh(z)/m",
                                            "ReLU with a 1/m normaliser, w = ReLU(z)/m"]
    wrong = [c for c in checks if c.bears_on == claims.COUNTEREXAMPLE
             and c.name.startswith(("tanh with b = −log m", "ReLU with b = −log m"))]
    assert len(wrong) == 3 and all(c.passed for c in wrong)


@pytest.mark.parametrize("original, mutant, caught_by", [
    ("q8_other[\"tanh mass\"].append((torch.tanh(z_scores).abs().sum(-1) / m))",
     "q8_other[\"tanh mass\"].append((torch.tanh(z_scores).abs().sum(-1) / math.sqrt(m)))",
     "largest Σ_j |tanh z_j|/m"),
    ("q8_other[\"relu sum\"].append(torch.relu(z_scores).sum(-1) / m)",
     "q8_other[\"relu sum\"].append(torch.relu(z_scores - math.log(m)).sum(-1))",
     "m-free: log–log slope of the mean Σ_j ReLU(z_j)/m"),
    ("q8_other[\"relu sum\"].append(torch.relu(z_scores).sum(-1) / m)",
     "q8_other[\"relu sum\"].append(torch.relu(z_scores).sum(-1) / math.sqrt(m))",
     "largest Σ_j ReLU(z_j)/m"),
], ids=["tanh over √m", "ReLU under the sigmoid's bias", "ReLU over √m"])
def test_q8_a_wrong_condition_for_tanh_or_relu_is_caught(original, mutant, caught_by):
    verdict, checks = run_section("Q8", (original, mutant))
    assert_caught("Q8", verdict, checks, caught_by)
