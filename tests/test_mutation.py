"""A verification must be able to fail: break a copy of what it checks, and watch it fail.

Each test runs one of the book's checks twice — on the real code, where it must pass, and on
a copy with one deliberate mistake (a *mutant*), where it must fail:

* the Q1 derivation of chapter 1 (the notebook's own sympy cell), with the scores made linear
  in the second token: the recorded check S(αX) = α² S(X) must then fail, and the verdict with
  it;
* the softmax Jacobian identity J = diag(p) − p pᵀ, on ``attnref.analysis.symbolic.softmax`` and on
  copies of its source with a temperature of 1/2 or with the normalisation dropped;
* the parity of ``attnref.scaled_dot_product_attention`` with torch's SDPA (the repository's
  own test in ``tests/test_attention_parity.py``), on a copy of ``attnref/attention.py`` that
  scales the scores by 1/d_k instead of 1/√d_k.

A mutation is applied by replacing an exact piece of source text; if that text is no longer
there (the code was reworded), the test fails and says which text to update.
"""

from __future__ import annotations

import inspect
import json
import textwrap
import types
from pathlib import Path

import pytest
import sympy as sp

import attnref
import attnref.attention
from attnref.analysis import symbolic as sym

ROOT = Path(__file__).resolve().parent.parent


def mutate(source: str, original: str, replacement: str, where: str) -> str:
    count = source.count(original)
    assert count == 1, (f"mutation site {original!r} found {count} times in {where}: "
                        "update tests/test_mutation.py to the current wording")
    return source.replace(original, replacement)


# ------------------------------------------------------------------------------------------
# 1. The notebook's Q1 derivation (symbolic)
# ------------------------------------------------------------------------------------------

Q1_NOTEBOOK = ROOT / "notebooks" / "01-nonlinearity.ipynb"
Q1_MARKER = "q1_degree = sym.homogeneity_degree"
Q1_SITE = "return inputs * w_q * w_k.T * inputs.T"
Q1_MUTANT = "return inputs * w_q * w_k.T * X.T"       # the second token no longer scales with the input


def q1_derivation() -> str:
    cells = json.loads(Q1_NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    found = [s for s in sources if Q1_MARKER in s]
    assert len(found) == 1, f"no single code cell of {Q1_NOTEBOOK.name} contains {Q1_MARKER!r}"
    return found[0]


def run_cell(source: str) -> list:
    """Run the cell; return the checks it recorded (claims.Evidence)."""
    from attnref.book import claims

    namespace = {"sp": sp, "sym": sym, "claims": claims, "glue": lambda *args, **kwargs: None}
    exec(compile(source, "<Q1 derivation>", "exec"), namespace)
    evidence = [v for v in namespace.values() if isinstance(v, claims.Evidence)]
    assert len(evidence) == 1, "the Q1 cell should record its checks in one claims.Evidence"
    return evidence[0].checks


def test_q1_derivation_passes_on_the_real_scores():
    from attnref.book import claims

    checks = run_cell(q1_derivation())
    assert checks and all(c.passed for c in checks), [c.name for c in checks if not c.passed]
    assert claims.decide(checks) == claims.HOLDS


def test_q1_derivation_fails_when_the_scores_are_not_quadratic():
    from attnref.book import claims

    checks = run_cell(mutate(q1_derivation(), Q1_SITE, Q1_MUTANT, Q1_NOTEBOOK.name))
    failed = [c.name for c in checks if not c.passed]
    assert any("α² S(X)" in name for name in failed), f"S(αX) = α² S(X) did not fail: {failed}"
    assert claims.decide(checks) != claims.HOLDS


# ------------------------------------------------------------------------------------------
# 2. The softmax Jacobian (symbolic)
# ------------------------------------------------------------------------------------------

def jacobian_identity_holds(softmax) -> bool:
    """Whether ∂p/∂z = diag(p) − p pᵀ for p = softmax(z), z of length 3, decided by sympy."""
    z = sp.symbols("z1:4", real=True)
    p = softmax(z)                                   # (3, 1) column
    jacobian = p.jacobian(z)                         # (3, 3)
    return sym.is_zero(jacobian - (sp.diag(*p) - p * p.T))


def softmax_mutant(original: str, replacement: str):
    source = textwrap.dedent(inspect.getsource(sym.softmax))
    namespace = {"sp": sp, "Sequence": object}
    exec(mutate(source, original, replacement, "attnref.analysis.symbolic.softmax"), namespace)
    return namespace["softmax"]


def test_softmax_jacobian_identity_holds_for_softmax():
    assert jacobian_identity_holds(sym.softmax)


@pytest.mark.parametrize("original, replacement", [
    ("sp.exp(z)", "sp.exp(2 * z)"),                      # temperature 1/2: J = 2 (diag(p) − p pᵀ)
    ("e / total", "e"),                                  # normalisation dropped: J = diag(e^z)
], ids=["temperature", "unnormalised"])
def test_softmax_jacobian_identity_fails_for_a_mutant(original, replacement):
    assert not jacobian_identity_holds(softmax_mutant(original, replacement))


# ------------------------------------------------------------------------------------------
# 3. Parity with torch's scaled_dot_product_attention (numerical)
# ------------------------------------------------------------------------------------------

SDPA_SITE = "scale = 1.0 / math.sqrt(d_k) if scale is None else scale"
SDPA_MUTANT = "scale = 1.0 / d_k if scale is None else scale"


def attention_mutant() -> types.ModuleType:
    """A copy of attnref/attention.py that scales the scores by 1/d_k."""
    path = Path(inspect.getfile(attnref.attention))
    source = mutate(path.read_text(encoding="utf-8"), SDPA_SITE, SDPA_MUTANT, path.name)
    module = types.ModuleType("attnref_attention_mutant")
    module.__file__ = str(path)
    exec(compile(source, f"{path} (mutant)", "exec"), module.__dict__)
    return module


def test_sdpa_parity_test_passes_on_attnref(gen):
    import test_attention_parity

    test_attention_parity.test_sdpa_matches_torch_without_mask(gen)


def test_sdpa_parity_test_fails_on_a_mutant_scaled_by_one_over_d_k(gen, monkeypatch):
    import test_attention_parity

    mutant = attention_mutant()
    monkeypatch.setattr(attnref, "scaled_dot_product_attention", mutant.scaled_dot_product_attention)
    with pytest.raises(AssertionError):
        test_attention_parity.test_sdpa_matches_torch_without_mask(gen)
