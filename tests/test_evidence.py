"""Verdicts follow from recorded evidence by one rule (``attnref.book.claims``), and a broken check
moves the verdict without stopping the notebook; ``make test`` then fails naming the check.

The rule (the catalogue's "How a verdict is decided"): every check of the claim as stated passes
→ holds; a counterexample holds (every check recorded for it passes) and every check under the
named conditions passes → holds under conditions; a counterexample holds and no condition is
named → does not hold; anything else → not established. Every recorded check can therefore move
a verdict.
"""

from __future__ import annotations

import math

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from attnref.analysis import stats
from attnref.book import claims


def evidence(stated=(), counter=(), conditioned=()):
    e = claims.Evidence("Q1")
    for i, passed in enumerate(stated):
        e.true(f"stated {i}", passed, kind=claims.SYMBOLIC)
    for i, passed in enumerate(counter):
        e.counterexample.true(f"counterexample {i}", passed, kind=claims.NUMERICAL)
    for i, passed in enumerate(conditioned):
        e.under(f"condition {i}").true(f"conditioned {i}", passed, kind=claims.PARITY)
    return e.verdict("A reason.")


@pytest.mark.parametrize("stated, counter, conditioned, verdict", [
    ((True, True), (), (), claims.HOLDS),
    ((True,), (False,), (), claims.NOT_ESTABLISHED),             # a recorded counterexample that does not hold
    ((), (True, False), (), claims.NOT_ESTABLISHED),             # one check of a counterexample breaks
    ((True,), (), (True,), claims.HOLDS),
    ((True, False), (), (), claims.NOT_ESTABLISHED),             # one stated check fails
    ((), (True,), (), claims.FAILS),
    ((False,), (True,), (), claims.FAILS),                       # the claim as stated fails, and is refuted
    ((), (True,), (True, True), claims.CONDITIONS),
    ((), (True,), (True, False), claims.NOT_ESTABLISHED),        # a condition's check fails
    ((True,), (True,), (), claims.NOT_ESTABLISHED),              # holds as stated and refuted: contradictory
    ((), (), (), claims.NOT_ESTABLISHED),                        # no evidence
    ((), (False,), (True,), claims.NOT_ESTABLISHED),             # conditions without a counterexample or a stated check
])
def test_the_rule(stated, counter, conditioned, verdict):
    assert evidence(stated, counter, conditioned).verdict == verdict


def test_conditions_are_named_by_the_checks_not_typed_beside_the_verdict():
    v = evidence((), (True,), (True, True))
    assert v.conditions == ["condition 0", "condition 1"]
    assert v.metadata["conditions"] == ["condition 0", "condition 1"]
    assert v.metadata["expected"] == claims.HOLDS and v.metadata["verdict"] == claims.CONDITIONS


def test_shorthands_compute_the_outcome():
    e = claims.Evidence("C3")
    assert e.exact("integer", 3, 3, kind=claims.SYMBOLIC)
    assert not e.exact("integer off by one", 4, 3, kind=claims.SYMBOLIC)
    # arrays compare element by element (their printed text is abridged: one wrong element of
    # 2000 would not show in it); a shape mismatch fails
    ranks = torch.arange(2000)
    wrong = ranks.clone()
    wrong[500] += 1
    assert e.exact("ranks", ranks, ranks.clone(), kind=claims.NUMERICAL)
    assert not e.exact("one rank of 2000 off", wrong, ranks, kind=claims.NUMERICAL)
    assert not e.exact("ranks of another shape", ranks[:10], ranks[:11], kind=claims.NUMERICAL)
    assert e.close("close", 1.0 + 1e-13, 1.0, 1e-12, kind=claims.NUMERICAL)
    assert not e.close("NaN is never close", math.nan, 1.0, 1.0, kind=claims.NUMERICAL)
    assert e.at_most("at most", torch.tensor(0.5), 1.0, kind=claims.NUMERICAL)
    assert not e.at_least("at least", 0.5, 1.0, kind=claims.NUMERICAL)
    interval = stats.hoeffding_mean(torch.full((100,), 0.5, dtype=torch.float64), 0.0, 1.0)
    assert e.within("inside", 0.5, interval)
    assert not e.within("outside", 2.0, interval)
    assert e.beyond("excluded", 2.0, interval, side="above")
    statistical = [c for c in e.checks if c.kind == claims.STATISTICAL]
    assert all(c.bound == "Hoeffding" and c.failure_probability == 1e-7 for c in statistical)
    assert e.verdict("x").verdict == claims.NOT_ESTABLISHED


@pytest.mark.parametrize("call, message", [
    (lambda e: e.check("a statistical check without a bound", True, kind=claims.STATISTICAL), "names its bound"),
    (lambda e: e.check("too likely to fail", True, kind=claims.STATISTICAL, bound="Hoeffding",
                       failure_probability=1e-3), "failure probability"),
    (lambda e: e.check("no sampling bound fails with probability 0", True, kind=claims.STATISTICAL,
                       bound="Hoeffding", failure_probability=0.0), "failure probability"),
    (lambda e: e.check("x", True, kind="vibes"), "kind must be one of"),
    (lambda e: e.true("x", 1, kind=claims.NUMERICAL), "computed boolean"),
    (lambda e: e.true("x", torch.tensor([True, False]), kind=claims.NUMERICAL), "computed boolean"),
    (lambda e: e.under("").true("x", True, kind=claims.NUMERICAL), "condition must be"),
    (lambda e: e.verdict(""), "reason"),
])
def test_bad_evidence_is_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call(claims.Evidence("Q1"))


def test_a_check_name_is_recorded_once():
    e = claims.Evidence("Q1")
    e.true("same name", True, kind=claims.SYMBOLIC)
    e.under("a condition").true("same name", True, kind=claims.SYMBOLIC)     # another condition: allowed
    with pytest.raises(ValueError, match="already recorded"):
        e.true("same name", True, kind=claims.SYMBOLIC)


def test_unknown_claims_and_models_are_refused():
    with pytest.raises(ValueError, match="unknown claim ID"):
        claims.Evidence("Z9")
    with pytest.raises(ValueError, match="unknown model"):
        claims.Evidence("C3", model="gpt-7")
    with pytest.raises(ValueError, match="no expected verdict"):
        claims.expected_verdict("Q1", "all-MiniLM-L6-v2")


def test_the_display_shows_the_verdict_reason_and_evidence():
    v = evidence((True,), (), ())
    bundle, metadata = v._repr_mimebundle_()
    assert bundle["text/plain"] == "Q1: holds (1/1 checks passed)"
    assert bundle["text/markdown"].startswith("**Q1: holds.** A reason.")
    assert "| stated 0 | symbolic | yes | true | ✓ |" in bundle["text/markdown"]
    assert metadata[claims.METADATA_KEY]["checks"][0]["name"] == "stated 0"


@pytest.mark.parametrize("value, text", [
    (2, "2"), (12345, "12 345"), (0.000123456, "0.000123"), (3.0e-16, "3·10⁻¹⁶"), (1e-12, "10⁻¹²"),
    (-2.5e8, "−2.5·10⁸"), (math.inf, "∞"), (True, "yes"), (torch.tensor(7), "7"), (None, "—"),
])
def test_values_are_formatted_for_a_reader(value, text):
    assert claims.format_value(value) == text


def test_computed_verdicts_are_collected_for_the_test_harness():
    claims.forget()
    evidence((True,), (), ())
    v = claims.Evidence("Q2")
    v.true("a failing check", False, kind=claims.NUMERICAL)
    v.verdict("Reason.")
    found = {c["id"]: c for c in claims.computed()}
    assert found["Q1"]["verdict"] == claims.HOLDS and found["Q1"]["failing"] == []
    assert found["Q2"]["verdict"] == claims.NOT_ESTABLISHED
    assert found["Q2"]["failing"][0]["name"] == "a failing check"
    claims.forget()
    assert claims.computed() == []


# ------------------------------------------------------------------------------------------
# A broken check: the notebook still runs, the verdict changes, the test names the check.
# ------------------------------------------------------------------------------------------

CLAIM_CELL = '''import os
from attnref.book import claims
from attnref.analysis import symbolic as sym
import sympy as sp

def softmax_jacobian_rank(n):
    # a plausible bug, switched on from outside: the Jacobian of softmax built as diag(p) + p pᵀ
    p = sym.softmax(sp.symbols(f"z0:{n}"))
    sign = 1 if os.environ.get("BREAK_CHECK") == "1" else -1
    J = sp.diag(*p) + sign * sp.Matrix(p) * sp.Matrix(p).T
    return J.subs({s: 0 for s in J.free_symbols}).rank()

q3 = claims.Evidence("Q3")
q3.exact("rank of the softmax Jacobian at z = 0, n = 3", softmax_jacobian_rank(3), 2, kind=claims.SYMBOLIC)
q3.exact("rank of the softmax Jacobian at z = 0, n = 4", softmax_jacobian_rank(4), 3, kind=claims.SYMBOLIC)
'''
VERDICT_CELL = 'q3.verdict("The Jacobian of softmax has rank $n - 1$.")'


def write_claim_notebook(path):
    """A one-claim notebook, executed once (unbroken) so that its stored outputs are real."""
    from nbclient import NotebookClient
    nb = new_notebook(cells=[new_markdown_cell("(claim-q3)=\n## Q3"), new_code_cell(CLAIM_CELL),
                             new_code_cell(VERDICT_CELL)],
                      metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}})
    import slowdown    # tools/testenv: the idle budget scaled by the load (a kernel start under load)
    NotebookClient(nb, timeout=round(slowdown.limit(120)), startup_timeout=round(slowdown.limit(60)),
                   kernel_name="python3").execute()
    nbformat.write(nb, path)
    return nb


def test_a_broken_check_changes_the_verdict_and_the_test_names_it(pytester, monkeypatch):
    notebooks = pytester.path / "notebooks"
    notebooks.mkdir()
    stored = write_claim_notebook(notebooks / "claim.ipynb")
    assert stored.cells[2].outputs[0]["metadata"][claims.METADATA_KEY]["verdict"] == claims.HOLDS

    monkeypatch.setenv("BREAK_CHECK", "1")
    result = pytester.runpytest_inprocess("-p", "nbplugin", "-p", "no:xdist", "--nbval-lax",
                                           "--nbval-current-env", "-rA", "notebooks")
    output = result.stdout.str()
    # Every cell of the notebook ran (nothing raised) ...
    assert "PASSED notebooks/claim.ipynb::Cell 0" in output and "PASSED notebooks/claim.ipynb::Cell 1" in output, output
    # ... the verdict moved, and the failure names the claim and the broken check.
    assert "FAILED notebooks/claim.ipynb::verdicts" in output, output
    assert ("Q3: computed 'not established', expected 'holds'; failing checks: "
            "'rank of the softmax Jacobian at z = 0, n = 3': measured 3, held to = 2") in output, output

    monkeypatch.setenv("BREAK_CHECK", "0")
    result = pytester.runpytest_inprocess("-p", "nbplugin", "-p", "no:xdist", "--nbval-lax",
                                           "--nbval-current-env", "-rA", "notebooks")
    assert "PASSED notebooks/claim.ipynb::verdicts" in result.stdout.str(), result.stdout.str()


# --- issue 44 item 5: interval-versus-value checks are exclusions, margins over several steps -----

def _interval(estimate, half, bound="empirical Bernstein", delta=1e-8, se=None):
    return stats.Interval(estimate, estimate - half, estimate + half, bound, delta, 100, se)


@pytest.mark.parametrize("method, measured, limit", [("at_least", 0.9, 0.5), ("at_most", 0.1, 0.5)])
def test_a_one_sided_check_with_a_bound_is_an_exclusion_by_default(method, measured, limit):
    """An interval's end against a value (at_least / at_most with a bound): its level bounds a wrong
    pass, so it is flagged (it was excludes=False: no false-failure rate, none listed as missing);
    se= gives its margin and false-failure rate; excludes=False still says otherwise."""
    e = claims.Evidence("C4")
    getattr(e, method)("no margin", measured, limit, kind=claims.STATISTICAL, bound="exact", failure_probability=1e-8)
    getattr(e, method)("with se", measured, limit, kind=claims.STATISTICAL, bound="exact", failure_probability=1e-8,
                       se=0.1)
    getattr(e, method)("a statistic against its radius", measured, limit, kind=claims.STATISTICAL, bound="DKW",
                       failure_probability=1e-8, excludes=False)
    getattr(e, method)("no bound", measured, limit, kind=claims.NUMERICAL)
    plain, with_se, radius, numeric = e.checks
    assert plain.excludes and plain.margin_se is None and plain.false_failure is None
    assert with_se.excludes and with_se.margin_se == pytest.approx(4.0)
    assert with_se.false_failure == pytest.approx(claims.false_failure_normal(4.0))
    assert not radius.excludes and not numeric.excludes
    info = claims.levels(e.checks)
    assert info["false_failure_not_stated"] == ["no margin"]
    assert "no false-failure rate stated for: no margin" in claims.levels_sentence(e.checks)


def test_a_margin_over_several_steps_is_a_union():
    """Σ Φ(−mᵢ), not Φ(−min m): three steps at 2, 2 and 3 standard errors fail a re-run about twice
    as often as the smallest alone says."""
    e = claims.Evidence("C4")
    e.check("three steps", True, kind=claims.STATISTICAL, bound="exact", failure_probability=1e-8,
            margin_se=[2.0, 2.0, 3.0])
    e.check("a tensor of steps", True, kind=claims.STATISTICAL, bound="exact", failure_probability=1e-8,
            margin_se=torch.tensor([2.0, math.inf]))
    three, tensor = e.checks
    assert three.margin_se == 2.0 and three.excludes
    assert three.false_failure == pytest.approx(2 * claims.false_failure_normal(2.0) + claims.false_failure_normal(3.0))
    assert tensor.margin_se == 2.0 and tensor.false_failure == pytest.approx(claims.false_failure_normal(2.0))
    with pytest.raises(ValueError, match="margin_se"):
        claims.Evidence("C4").check("empty", True, kind=claims.STATISTICAL, bound="exact",
                                    failure_probability=1e-8, margin_se=[])


def test_intervals_of_several_guaranteed_bounds_are_named_and_summed():
    """intervals= may mix guaranteed bounds (an empirical-Bernstein against a median-of-means
    interval): the bound names both, the δ is their sum, the level is guaranteed; a nominal interval
    cannot join guaranteed ones."""
    e = claims.Evidence("C4")
    e.check("mixed", True, kind=claims.STATISTICAL,
            intervals=[_interval(1.0, 0.1), _interval(0.5, 0.1, "median of means", 2e-8)], margin_se=5.0)
    (mixed,) = e.checks
    assert mixed.bound == "empirical Bernstein + median of means" and mixed.guaranteed
    assert mixed.failure_probability == pytest.approx(3e-8)
    assert claims.levels(e.checks)["guaranteed"] == 1
    assert "failure prob." in claims.kind_label(mixed)
    with pytest.raises(ValueError, match="bound"):
        claims.Evidence("C4").check("nominal and guaranteed", True, kind=claims.STATISTICAL,
                                    intervals=[_interval(1.0, 0.1), _interval(1.0, 0.1, "CLT (asymptotic)", 0.05)])


#: Notebooks whose interval-versus-value checks are known to be unflagged: chapter 8's decisions get
#: their margins when the chapter reads the confirmatory round (issues 43 and 44 item 5).
NOT_YET_FLAGGED = {"08-training.ipynb"}


def _one_sided_unflagged(path):
    """Voting checks with a bound whose 'held to' compares an interval's end (or a count of
    intervals) with a value — ≥, ≤, above, below, >, < — but that are not recorded as exclusions.
    A check held within a band (∋, ⊂, '± ', 'within') is a coverage or equivalence check; a
    statistic held to its own radius (a KS distance against ε_N) covers the truth too."""
    import json
    out = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        for output in cell.get("outputs", []):
            meta = output.get("metadata", {}).get(claims.METADATA_KEY)
            for c in (meta or {}).get("checks", []):
                held = c["held_to"]
                if not c.get("bound") or c["bears_on"] == claims.DEMONSTRATION or c.get("excludes"):
                    continue
                if any(mark in held for mark in ("∋", "⊂", "± ", "within", "ε_N")):
                    continue
                if any(mark in held for mark in ("≥", "≤", "above", "below", ">", "<", "all ")):
                    out.append(f"{meta['id']}{' on ' + meta['model'] if meta.get('model') else ''}: {c['name']}")
    return out


@pytest.mark.parametrize("notebook", sorted(p.name for p in (
    __import__("pathlib").Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb")))
def test_every_interval_versus_value_check_is_flagged(notebook):
    """Round 5: one-sided checks that compare an interval's end with a value were recorded with
    excludes=False in chapters 4, 6 and 6b, so their false-failure rate was neither stated nor
    listed as missing. Every notebook's recorded evidence is scanned."""
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "notebooks" / notebook
    unflagged = _one_sided_unflagged(path)
    if notebook in NOT_YET_FLAGGED:
        # still scanned: once the chapter flags its checks this fails until it leaves the list
        assert unflagged, f"{notebook} flags every one-sided check now: take it off NOT_YET_FLAGGED"
        pytest.xfail(f"{len(unflagged)} one-sided checks of {notebook} not yet flagged (issues 43, 44 item 5)")
    assert not unflagged, unflagged
