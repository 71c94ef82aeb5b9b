"""Roles and levels of recorded checks (attnref.book.claims): supporting checks and
demonstrations, guaranteed versus nominal statistical levels, "fails if" lines."""

from __future__ import annotations

import pytest

from attnref.book import claims


def _evidence(*steps):
    e = claims.Evidence("Q1")
    for step in steps:
        step(e)
    return e


def test_a_supporting_check_must_pass_but_decides_nothing():
    holds = lambda e: e.exact("degree", 2, 2, kind=claims.SYMBOLIC)
    parity_ok = lambda e: e.supporting.at_most("attnref − torch", 1e-16, 1e-12, kind=claims.PARITY)
    parity_bad = lambda e: e.supporting.at_most("attnref − torch", 1e-3, 1e-12, kind=claims.PARITY)
    refuted = lambda e: e.counterexample.exact("a case where it fails", 3, 3, kind=claims.NUMERICAL)
    assert claims.decide(_evidence(holds, parity_ok).checks) == claims.HOLDS
    assert claims.decide(_evidence(holds, parity_bad).checks) == claims.NOT_ESTABLISHED
    # a parity beside a refuted claim no longer makes the evidence contradictory
    assert claims.decide(_evidence(refuted, parity_ok).checks) == claims.FAILS
    assert claims.decide(_evidence(refuted, parity_bad).checks) == claims.NOT_ESTABLISHED
    assert claims.decide(_evidence(parity_ok).checks) == claims.NOT_ESTABLISHED     # nothing voted


def test_a_demonstration_is_shown_and_does_not_vote():
    e = _evidence(lambda e: e.exact("degree", 2, 2, kind=claims.SYMBOLIC),
                  lambda e: e.demonstration.at_most("CLT band on t₃: misses", 33, 0, kind=claims.NUMERICAL))
    assert claims.decide(e.checks) == claims.HOLDS
    assert "*demonstration, does not vote:*" in claims.evidence_table(e.checks)


def test_guaranteed_and_nominal_levels_are_told_apart_and_summed_by_a_union_bound():
    e = claims.Evidence("C3")
    e.at_most("KS distance", 0.01, 0.02, kind=claims.STATISTICAL, bound="DKW", failure_probability=1e-7)
    e.at_most("mean", 0.1, 0.2, kind=claims.STATISTICAL, bound="Hoeffding", failure_probability=2e-7)
    e.at_most("bootstrap interval", 0.1, 0.2, kind=claims.STATISTICAL, bound="bootstrap (asymptotic)",
              failure_probability=1e-3)
    e.demonstration.at_most("CLT band", 0.5, 0.2, kind=claims.STATISTICAL, bound="CLT (asymptotic)",
                            failure_probability=1e-7)
    levels = claims.levels(e.checks)
    assert levels == {"guaranteed": 2, "failure_probability": pytest.approx(3e-7), "nominal": ["bootstrap interval"],
                      # an interval's end against a value is an exclusion by default (issue 44 item 5);
                      # without a margin its false-failure rate is listed as not stated
                      "exclusions": 3, "false_failure": None, "smallest_margin_se": None,
                      "false_failure_not_stated": ["KS distance", "mean", "bootstrap interval"]}
    table = claims.evidence_table(e.checks)
    assert "DKW, failure prob. ≤ 10⁻⁷" in table and "bootstrap (asymptotic), nominal level 0.001" in table
    sentence = claims.levels_sentence(e.checks)
    assert "every interval covers its true value with probability at least 1 − 3·10⁻⁷ (union bound)" in sentence
    assert "nominal levels only" in sentence and "bootstrap interval (0.001)" in sentence
    assert e.checks[0].guaranteed and not e.checks[2].guaranteed
    with pytest.raises(ValueError, match="failure probability"):
        e.at_most("too loose", 0.1, 0.2, kind=claims.STATISTICAL, bound="Hoeffding", failure_probability=1e-3)
    with pytest.raises(ValueError, match="nominal level"):
        e.at_most("no level", 0.1, 0.2, kind=claims.STATISTICAL, bound="t (normal theory)", failure_probability=0.9)


def test_fails_if_lines_are_shown_in_their_own_column():
    e = claims.Evidence("Q1")
    e.exact("degree", 2, 2, kind=claims.SYMBOLIC, fails_if="a linear (degree 1) or cubic score")
    e.at_most("attnref − torch", 1e-16, 1e-12, kind=claims.PARITY)
    table = claims.evidence_table(e.checks)
    assert table.splitlines()[0].endswith("Fails if |")
    assert "a linear (degree 1) or cubic score |" in table and table.splitlines()[-1].endswith("— |")
    assert "Fails if" not in claims.evidence_table(e.checks[1:])       # only when a check names one
    with pytest.raises(ValueError, match="fails_if"):
        e.exact("empty", 1, 1, kind=claims.SYMBOLIC, fails_if="  ")


def test_a_recheck_whose_premise_is_measured_to_fail_says_so():
    e = claims.Evidence("C3", model="all-MiniLM-L6-v2")
    e.premise_fails.at_least("within-row Var[q·k] / d_k (premise: 1)", 1.99, 1.5, kind=claims.REAL_MODEL)
    e.at_most("anything else measured", 0.1, 1.0, kind=claims.REAL_MODEL)
    assert claims.decide(e.checks) == claims.PREMISE_FAILS
    assert "*premise fails:*" in claims.evidence_table(e.checks)
    broken = claims.Evidence("C3", model="all-MiniLM-L6-v2")
    broken.premise_fails.at_least("within-row Var[q·k] / d_k (premise: 1)", 1.01, 1.5, kind=claims.REAL_MODEL)
    assert claims.decide(broken.checks) == claims.NOT_ESTABLISHED
    with pytest.raises(ValueError, match="rechecks"):
        claims.Evidence("C3").premise_fails


def test_a_recheck_may_state_the_level_its_sample_supports_a_claim_may_not():
    recheck = claims.Evidence("D2", model="SmolLM2-135M-Instruct")
    recheck.at_least("sign test: blocks whose gradient falls toward the output (16 sentences)", 14, 12,
                     kind=claims.STATISTICAL, bound="exact", failure_probability=0.002)
    assert claims.levels(recheck.checks)["failure_probability"] == 0.002
    with pytest.raises(ValueError, match="failure probability"):
        claims.Evidence("D2").at_least("the same on a claim", 14, 12, kind=claims.STATISTICAL, bound="exact",
                                       failure_probability=0.002)
