"""A verification must be able to fail: break a copy of what it checks, and watch it fail.

Each test runs one of the book's checks twice — on the real code, where it must pass, and on
a copy with one deliberate mistake (a *mutant*), where it must fail:

* the softmax Jacobian identity J = diag(p) − p pᵀ, on ``attnref.analysis.symbolic.softmax`` and on
  copies of its source with a temperature of 1/2 or with the normalisation dropped;
* the parity of ``attnref.scaled_dot_product_attention`` with torch's SDPA (the repository's
  own test in ``tests/test_attention_parity.py``), on a copy of ``attnref/attention.py`` that
  scales the scores by 1/d_k instead of 1/√d_k.

Every claim's own checks get the same treatment in ``tests/test_ch<N>_checks.py`` (one plausible
bug per claim, caught by a named check, and the verdict moves).

A mutation is applied by replacing an exact piece of source text; if that text is no longer
there (the code was reworded), the test fails and says which text to update.
"""

from __future__ import annotations

import inspect
import textwrap
import types
from pathlib import Path

import pytest
import sympy as sp

import attnref
import attnref.attention
from attnref.analysis import symbolic as sym



def mutate(source: str, original: str, replacement: str, where: str) -> str:
    count = source.count(original)
    assert count == 1, (f"mutation site {original!r} found {count} times in {where}: "
                        "update tests/test_mutation.py to the current wording")
    return source.replace(original, replacement)


# ------------------------------------------------------------------------------------------
# 1. The softmax Jacobian (symbolic)
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
# 2. Parity with torch's scaled_dot_product_attention (numerical)
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
