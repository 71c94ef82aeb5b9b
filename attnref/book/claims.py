"""The claims registry, the evidence a notebook records, and the verdict computed from it.

A notebook never types a verdict. Each check of a claim is recorded as :class:`Check` — a name
a reader understands, its kind, the measured value, what it is held to, whether it passed, and
what it bears on — and :meth:`Evidence.verdict` applies one rule to all of them
(:func:`decide`, the rule of the catalogue's "How a verdict is decided"):

* every check that bears on the claim **as stated** passes (and no counterexample does)
  → *holds*;
* a **counterexample** to the claim as stated holds (every check recorded for it passes), and
  every check restricted to the named **conditions** passes → *holds under conditions*; the
  conditions are the names of those checks' conditions, never a string typed beside the verdict;
* a counterexample holds and no condition is named → *does not hold*;
* a recheck on a trained model whose **premise** is measured not to hold there (every
  ``premise_fails`` check passes) → *premise fails here*: the claim is not tested in that model;
* anything else (a failing check of the claim or of a condition, a recorded counterexample check
  that fails, a counterexample beside a claim that passed as stated, no evidence) → *not
  established*, which ``make test`` fails on.

Two roles do not vote: a **supporting** check (a parity with torch, an identity the other checks
rely on) must pass — if it fails the evidence is *not established* — but never proves or refutes
the claim; a **demonstration** is shown beside the evidence and ignored by the rule. Every check
may say in one line what it rules out (``fails_if``), and how a re-run on another CPU must agree
with its stored value (``agree``); a NaN or ±inf never passes.

What a check's failure probability bounds depends on the check. For ``within`` (the interval
contains the value the claim predicts) it bounds a wrong *fail*. For an exclusion or ordering check
(``beyond``: the interval lies beyond a value; or any check recorded with ``excludes=True``) it
bounds a wrong *pass*; a wrong fail — a re-run of the sampling failing though the claim holds —
depends on how far the estimate sits from the value: such a check records that margin in standard
errors (``margin_se``, from the interval's ``standard_error`` or ``se=``) and its false-failure rate
(``false_failure``, by default Φ(−margin), :func:`false_failure_normal`), shown in the evidence
table and summed in the "Levels" line. A check over several intervals (``within``/``beyond`` with a
sequence, or ``intervals=`` on any recorder) records the sum of their failure probabilities: union
bounds are added up by the engine, never typed. Any check that names a bound (a training run's t
interval too) shows its level.

So every recorded check can move a verdict: a notebook records as a counterexample only what
it shows to hold, and one counterexample check that breaks turns *does not hold* into *not
established* (a single standing counterexample would refute the claim, but a broken check means
the evidence is not what the notebook says it is).

A failing check does not raise: the notebook runs to its end and the evidence table shows which
check moved the verdict. ``assert`` stays for the preconditions of a computation (shapes, a
solver's convergence), not for the claim.

Use::

    q1 = claims.Evidence("Q1")
    q1.exact("degree of S in the entries of X (sympy)", q1_degree, 2, kind=claims.SYMBOLIC)
    q1.at_most("|attnref − torch| of the scores", q1_parity, 1e-12, kind=claims.PARITY)
    q6.counterexample.at_least("log–log slope, only the query small", slope, 0.9, kind=claims.NUMERICAL)
    q6.under("both inputs small").close("log–log slope of the query dependence", slope, 3, tol, ...)
    c3.within("E[(q·k)²]/d_k, each width", 1.0, [interval_16, interval_64, interval_256])  # δ summed
    l5.beyond("share of positive weights", 0.0, interval, side="below")   # margin and false failure
    q1.verdict("sympy finds degree 2 and the measured slope is 2.")   # displays the verdict

The verdict output carries machine-readable metadata (``attnref_verdict``) from which the book
generates the verdict boxes, the claims index and its tests. The registry it checks against (the
chapters, claims, models and expected verdicts) is data in :mod:`attnref.book.registry`, re-exported
here. This module needs only the standard library: the book build loads it by path, without torch.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field
from typing import Any

# The registry (verdict names, chapters, claims, models, expected verdicts of the rechecks) is
# data, kept in ``registry.py``; every name is re-exported here. Loaded by path (the book build,
# the portable comparison) this module has no package, so it loads its sibling by path too.
try:
    from . import registry as _registry
except ImportError:                      # loaded by path, outside the package
    import importlib.util as _importlib_util
    import sys as _sys
    from pathlib import Path as _Path

    _REGISTRY_NAME = f"{__name__}_registry"
    if _REGISTRY_NAME in _sys.modules:
        _registry = _sys.modules[_REGISTRY_NAME]
    else:
        _spec = _importlib_util.spec_from_file_location(_REGISTRY_NAME, _Path(__file__).with_name("registry.py"))
        _registry = _importlib_util.module_from_spec(_spec)
        _sys.modules[_REGISTRY_NAME] = _registry    # dataclasses look their module up in sys.modules
        _spec.loader.exec_module(_registry)

HOLDS, CONDITIONS, FAILS = _registry.HOLDS, _registry.CONDITIONS, _registry.FAILS
PREMISE_FAILS, NOT_ESTABLISHED = _registry.PREMISE_FAILS, _registry.NOT_ESTABLISHED
VERDICTS, ALL_VERDICTS = _registry.VERDICTS, _registry.ALL_VERDICTS
Chapter, Claim, Model = _registry.Chapter, _registry.Claim, _registry.Model
CHAPTERS, CLAIMS, MODELS, RECHECKS = _registry.CHAPTERS, _registry.CLAIMS, _registry.MODELS, _registry.RECHECKS
claim, expected_verdict = _registry.claim, _registry.expected_verdict


# Kinds of check.
SYMBOLIC = "symbolic"          # a sympy derivation: exact
NUMERICAL = "numerical"        # a deterministic computation with attnref, held to round-off or a derived bound
PARITY = "parity"              # attnref against an independent implementation (torch, transformers, a loop)
STATISTICAL = "statistical"    # a random sample held to a stated bound with a failure probability
REAL_MODEL = "real model"      # measured on a trained model's weights and activations
TRAINING = "training"          # a controlled training experiment (chapter 8)
KINDS = (SYMBOLIC, NUMERICAL, PARITY, STATISTICAL, REAL_MODEL, TRAINING)

# What a check bears on.
STATED = "claim as stated"
CONDITION = "under a condition"
COUNTEREXAMPLE = "counterexample"      # a case where the claim's conclusion fails
PREMISE = "premise fails"              # rechecks: the claim's premise measured not to hold here
SUPPORTING = "supporting"              # a parity or identity the other checks rely on: must pass,
                                       # neither proves nor refutes the claim
DEMONSTRATION = "demonstration"        # shown beside the evidence; does not vote
BEARINGS = (STATED, CONDITION, COUNTEREXAMPLE, PREMISE, SUPPORTING, DEMONSTRATION)

# Types of statistical bound. A guaranteed bound holds at the sample size used (exact,
# finite-sample): its failure probability is a probability, at most MAX_FAILURE_PROBABILITY. A
# nominal one holds in a limit or under an assumption the data do not show (CLT, bootstrap,
# normal-theory t): its level is nominal, shown as such, and not summed with the guaranteed ones.
GUARANTEED_BOUNDS = ("exact", "Hoeffding", "Bernstein", "empirical Bernstein", "DKW", "median of means",
                     "Chebyshev", "Clopper–Pearson", "permutation (exact)")
NOMINAL_BOUNDS = ("CLT (asymptotic)", "bootstrap (asymptotic)", "t (normal theory)")
BOUNDS = GUARANTEED_BOUNDS + NOMINAL_BOUNDS
#: How a check over intervals of several guaranteed bounds names them (``intervals=`` with, e.g., an
#: empirical-Bernstein and a median-of-means interval): "empirical Bernstein + median of means".
BOUND_JOIN = " + "


def is_guaranteed(bound: str | None) -> bool:
    """Whether ``bound`` (one of :data:`BOUNDS`, or guaranteed bounds joined by :data:`BOUND_JOIN`)
    is guaranteed at the sample size used."""
    return bound is not None and all(part in GUARANTEED_BOUNDS for part in str(bound).split(BOUND_JOIN))


def is_bound(bound: str | None) -> bool:
    """Whether ``bound`` names a known bound (or several guaranteed ones, joined)."""
    return bound in BOUNDS or is_guaranteed(bound)
MAX_FAILURE_PROBABILITY = 1e-6
RECHECK_MAX_FAILURE_PROBABILITY = 0.05

#: Metadata key of a verdict output in an executed notebook.
METADATA_KEY = "attnref_verdict"

# How a re-run on another machine must agree with a check's stored value (``Check.agree``). The
# last bits of a float depend on the CPU kernels torch picks (AVX-512, AVX2, default) and on the
# BLAS path, so a stored output is compared with a re-run within a tolerance that belongs to the
# check, stated where it is recorded (each recorder method has a default; ``agree=`` overrides it):
#   EXACT                     the measured text is identical (integers, ranks, booleans, sympy, text);
#   relative(r)               |a − b| ≤ r·max(|a|, |b|) (a float64 quantity that is not round-off);
#   relative(r, floor=f)      … or both |a|, |b| ≤ f: a residual below f is round-off, whose digits
#                             depend on the kernels (f is a tenth of the check's bound by default).
# The verdict, every pass flag, every name and every bound still compare exactly.
EXACT = "exact"
RELATIVE_DEFAULT = 1e-9
#: A value measured on a trained model (float32 weights and activations, thousands of operations deep).
REAL_MODEL_RELATIVE = 1e-5


def relative(rel: float = RELATIVE_DEFAULT, floor: float = 0.0) -> str:
    """An agreement rule: relative tolerance ``rel``, and below ``floor`` any two values agree."""
    rel, floor = float(rel), float(floor)
    if not (0 <= rel < 1) or not (floor >= 0) or not math.isfinite(floor):
        raise ValueError(f"relative(rel, floor) needs 0 ≤ rel < 1 and a finite floor ≥ 0, got {rel!r}, {floor!r}")
    return f"relative {rel:.3g}" + (f" or both ≤ {floor:.3g}" if floor > 0 else "")


def below(value: Any, bound: Any, digits: int = 3) -> str:
    """A round-off residual as text that reads the same on every machine: "below 10⁻¹²" (the
    bound its check holds it to) when it is within it; else the measured value itself (and the
    check fails). Use it wherever a reason or a printed line would show a round-off residual."""
    v, b = _number(value), float(_number(bound))
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and abs(v) <= b:
        return f"below {format_value(b, digits)}"
    return format_value(v, digits)


def parse_agreement(spec: str) -> tuple[float, float] | None:
    """``None`` for EXACT, else ``(rel, floor)`` of a :func:`relative` rule."""
    if spec == EXACT:
        return None
    match = re.fullmatch(r"relative (\S+)(?: or both ≤ (\S+))?", str(spec))
    if not match:
        raise ValueError(f"not an agreement rule: {spec!r} (use claims.EXACT or claims.relative(...))")
    return float(match.group(1)), float(match.group(2) or 0.0)


def values_agree(spec: str, stored: Any, new: Any) -> bool:
    """Whether a re-run's value ``new`` agrees with the ``stored`` one under the rule ``spec``.
    Non-numbers (and EXACT) must be equal; NaN never agrees with anything."""
    rule = parse_agreement(spec)
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (stored, new))
    if rule is None or not numeric:
        return stored == new and not (isinstance(stored, float) and math.isnan(stored))
    a, b = float(stored), float(new)
    if not (math.isfinite(a) and math.isfinite(b)):
        return a == b                               # ±inf only with itself; NaN never
    rel, floor = rule
    scale = max(abs(a), abs(b))
    return abs(a - b) <= rel * scale or scale <= floor


def margins_agree(stored: float | None, new: float | None) -> bool:
    """Whether two margins in standard errors (``Check.margin_se``) agree across machines: a margin
    is a difference of measured values over a standard error, so its last digits follow the
    kernels; a thousandth of a standard error (or of the margin) is immaterial."""
    if stored is None or new is None:
        return stored is None and new is None
    return abs(stored - new) <= 1e-3 * max(1.0, abs(stored), abs(new))


def false_failures_agree(stored: float | None, new: float | None) -> bool:
    """Whether two false-failure rates agree across machines: both negligible (below
    :data:`NEGLIGIBLE_FALSE_FAILURE`), or within 10 % (a rate Φ(−x) moves by x·Δx in its logarithm
    when the margin x moves by Δx)."""
    if stored is None or new is None:
        return stored is None and new is None
    if max(stored, new) < NEGLIGIBLE_FALSE_FAILURE:
        return True
    return abs(stored - new) <= 0.1 * max(stored, new)


# Checks
# ---------------------------------------------------------------------------------------------

def _elements(value: Any) -> int:
    """How many elements a torch tensor or numpy array holds; 1 for anything else."""
    shape = getattr(value, "shape", None)
    if shape is None or hasattr(value, "equals") or not hasattr(value, "dtype"):
        return 1                                   # scalars, strings, sympy objects
    return math.prod(shape)


def _number(value: Any) -> float | int | bool | str | None:
    """A JSON-friendly scalar from a Python, numpy, torch or sympy scalar (or a one-element array)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    item = getattr(value, "item", None)
    if callable(item):
        try:
            value = item()
        except (ValueError, RuntimeError, TypeError):
            return str(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if getattr(value, "is_Integer", False):        # sympy
        return int(value)
    if getattr(value, "is_Number", False):
        return float(value)
    return str(value)


def _boolean(name: str, value: Any) -> bool:
    """A computed boolean (Python, numpy or torch, one element) → bool; anything else is an error."""
    if isinstance(value, bool):
        return value
    dtype = str(getattr(value, "dtype", ""))
    numel = value.numel() if callable(getattr(value, "numel", None)) else getattr(value, "size", None)
    if "bool" in dtype and numel == 1:
        return bool(value)
    raise ValueError(f"{name} must be a computed boolean, got {type(value).__name__}")


SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def format_value(value: Any, digits: int = 3) -> str:
    """A measured value as the evidence table shows it: integers exactly, floats to ``digits``
    significant digits (stored outputs must not depend on the last bits of a float)."""
    value = _number(value)
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}".replace(",", " ") if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "∞" if value > 0 else "−∞"
        if value == 0:
            return "0"
        if value == int(value) and abs(value) < 1e6:
            return str(int(value))
        text = f"{value:.{digits}g}"
        if "e" in text:
            mantissa, exponent = text.split("e")
            exponent = int(exponent)
            power = "10" + str(exponent).translate(SUPERSCRIPT)
            text = power if mantissa in ("1", "1.0") else f"{mantissa}·{power}"
        return text.replace("-", "−")
    return str(value)


@dataclass(frozen=True)
class Check:
    """One recorded check of a claim."""

    name: str                        # what was checked, for a reader
    kind: str                        # one of KINDS
    measured: str                    # the measured value, formatted
    held_to: str                     # the tolerance, bound or expected value, formatted
    passed: bool
    bears_on: str = STATED           # one of BEARINGS
    condition: str | None = None     # the named condition, for bears_on == CONDITION
    bound: str | None = None         # statistical checks: one of BOUNDS
    failure_probability: float | None = None   # statistical checks: P(the check fails though the claim holds)
    value: float | int | bool | str | None = None   # the measured value, unformatted (tests, figures)
    agree: str = EXACT               # how a re-run on another machine must agree (see EXACT, relative)
    fails_if: str | None = None      # the bug or alternative this check rules out, in one line
    # Exclusion and ordering checks (an interval must lie beyond a value: ``beyond``, or
    # ``excludes=True``): the failure probability bounds a wrong *pass*; a wrong *fail* (the claim
    # holds, a re-run of the sampling fails the check) depends on how far the estimate sits from
    # the excluded value. ``margin_se``: that distance from the interval's near end to the value,
    # in standard errors of the estimate (the smallest over the check's intervals);
    # ``false_failure``: the probability that a re-run fails though the claim holds
    # (see :func:`false_failure_normal` for the default, and ``false_failure_basis``).
    excludes: bool = False
    margin_se: float | None = None
    false_failure: float | None = None
    false_failure_basis: str | None = None

    @property
    def guaranteed(self) -> bool:
        """A check with a bound whose failure probability is guaranteed (not a nominal level)."""
        return is_guaranteed(self.bound) and self.failure_probability is not None

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


class _Recorder:
    """Adds checks to an :class:`Evidence` with a fixed bearing (and condition)."""

    def __init__(self, evidence: "Evidence", bears_on: str, condition: str | None = None):
        self._evidence = evidence
        self._bears_on = bears_on
        self._condition = condition

    @property
    def evidence(self) -> "Evidence":
        """The :class:`Evidence` this recorder adds to (to record a supporting check beside it)."""
        return self._evidence

    # The general form --------------------------------------------------------------------
    def check(self, name: str, passed: Any, *, kind: str, measured: Any = None, held_to: str = "",
              bound: str | None = None, failure_probability: float | None = None, digits: int = 3,
              agree: str | None = None, finite: bool = True, fails_if: str | None = None,
              intervals: Any = None, excludes: bool | None = None, margin_se: Any = None,
              false_failure: Any = None, false_failure_basis: str | None = None) -> bool:
        """Record a check whose outcome ``passed`` was computed by the caller; returns it.

        ``fails_if``: one line naming the bug or alternative that would make this check fail
        (shown in the evidence table). A statistical check names its ``bound``; with a guaranteed
        bound its ``failure_probability`` is at most :data:`MAX_FAILURE_PROBABILITY`, with a
        nominal one (:data:`NOMINAL_BOUNDS`) it is the nominal level, shown as such. A check of
        another kind (a training run's t interval) may name a bound and level too: they are shown.

        ``intervals``: the interval(s) (:class:`attnref.analysis.stats.Interval`) the check's
        outcome was computed from. Their bound is the check's bound and the sum of their failure
        probabilities its failure probability (a union bound the engine adds up: a ``bound`` or
        ``failure_probability`` also passed must agree with it).

        ``excludes=True``: the check passes when an interval lies beyond a value (an exclusion or
        an ordering: "the interval lies above 0", "this interval lies below that one"), so its
        failure probability bounds a wrong *pass*. ``margin_se``: the distance from the excluded
        value to the interval's near end, in standard errors of the estimate; ``false_failure``:
        the probability that a re-run fails though the claim holds (default from ``margin_se``:
        :func:`false_failure_normal`), with ``false_failure_basis`` saying how it was obtained
        (a simulation, an exact binomial …). Either implies ``excludes=True``.

        ``agree``: how a re-run on another machine must agree with this value (EXACT or a
        :func:`relative` rule; default EXACT for integers, booleans and text, relative 1e-9 for
        floats). ``finite``: a measured NaN or ±inf fails the check, whatever ``passed`` says,
        unless ``finite=False`` (a check *about* a non-finite value, e.g. E[x⁴] = ∞)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        passed = _boolean("passed", passed)
        if intervals is not None:
            union = _intervals(name, intervals, "intervals")
            union_bound, union_probability = _union(name, union)
            if bound is not None and bound != union_bound:
                raise ValueError(f"{name}: bound={bound!r} but the intervals passed have the bound {union_bound!r}")
            if failure_probability is not None and not math.isclose(failure_probability, union_probability,
                                                                    rel_tol=1e-9):
                raise ValueError(f"{name}: failure_probability={failure_probability!r} but the {len(union)} "
                                 f"intervals passed sum to {union_probability!r} (leave it out: it is their sum)")
            bound, failure_probability = union_bound, union_probability
        margins = _margins(name, margin_se)
        margin_se = None if margins is None else (min(margins) if all(math.isfinite(x) or x == math.inf
                                                                      for x in margins) else math.nan)
        false_failure = _optional_real(name, "false_failure", false_failure)
        if false_failure is not None and not 0 <= false_failure <= 1:
            raise ValueError(f"{name}: false_failure is a probability in [0, 1], got {false_failure!r}")
        if false_failure_basis is not None and (not isinstance(false_failure_basis, str)
                                                or not false_failure_basis.strip()):
            raise ValueError(f"{name}: false_failure_basis must be a non-empty line, got {false_failure_basis!r}")
        if false_failure is None and margin_se is not None and not math.isnan(margin_se) \
                and (math.isfinite(margin_se) or len(margins) > 1):
            # a union over the steps: Σ Φ(−mᵢ), not Φ(−min m) (an infinite margin adds 0)
            false_failure = min(1.0, math.fsum(false_failure_normal(x) for x in margins))
            false_failure_basis = false_failure_basis or NORMAL_AT_ESTIMATE
        elif false_failure is not None and false_failure_basis is None:
            raise ValueError(f"{name}: a false_failure passed in names its basis (false_failure_basis=…)")
        if margin_se is not None and not math.isfinite(margin_se):
            margin_se = None                        # a NaN margin: the check fails, nothing to record
        excludes = bool(excludes) or margin_se is not None or false_failure is not None
        if kind == STATISTICAL:
            if not is_bound(bound):
                raise ValueError(f"{name}: a statistical check names its bound, one of {BOUNDS}; got {bound!r}")
            # a claim's guaranteed checks: ≤ 1e-6 each; a recheck on a trained model has the sample
            # it has (16 sentences cannot support 1e-7): up to 0.05, stated and summed in its verdict
            limit = (MAX_FAILURE_PROBABILITY if self._evidence.model is None else RECHECK_MAX_FAILURE_PROBABILITY) \
                if is_guaranteed(bound) else 0.5
            if failure_probability is None or not 0 < failure_probability <= limit:
                what = "failure probability" if is_guaranteed(bound) else "nominal level"
                raise ValueError(f"{name}: a statistical check with a {bound} bound states a {what} in "
                                 f"(0, {limit:g}], got {failure_probability!r}")
        elif bound is not None and not is_bound(bound):
            raise ValueError(f"{name}: bound must be one of {BOUNDS}, got {bound!r}")
        elif bound is not None and failure_probability is not None and not 0 < failure_probability <= 0.5:
            raise ValueError(f"{name}: a {bound} bound states a level in (0, 0.5], got {failure_probability!r}")
        text = measured if isinstance(measured, str) else format_value(measured, digits)
        value = _number(measured)
        if isinstance(value, float) and not math.isfinite(value):
            passed = passed and not finite          # NaN or ±inf never passes a check of a finite value
            value = str(value)
        elif finite and isinstance(measured, str) and _NONFINITE.search(measured):
            passed = False                          # an interval or text holding NaN or ∞
        if agree is None:      # a trained model runs in float32: its last digits depend on the kernels
            agree = (relative(REAL_MODEL_RELATIVE) if kind == REAL_MODEL else relative()) \
                if isinstance(value, float) else EXACT
        parse_agreement(agree)
        if fails_if is not None and (not isinstance(fails_if, str) or not fails_if.strip()):
            raise ValueError(f"{name}: fails_if must be a non-empty line, got {fails_if!r}")
        entry = Check(name=name, kind=kind, measured=text, held_to=held_to, passed=passed,
                      bears_on=self._bears_on, condition=self._condition, bound=bound,
                      failure_probability=failure_probability, value=value, agree=agree,
                      fails_if=None if fails_if is None else " ".join(fails_if.split()),
                      excludes=excludes, margin_se=margin_se, false_failure=false_failure,
                      false_failure_basis=None if false_failure is None else " ".join(false_failure_basis.split()))
        self._evidence._add(entry)
        return passed

    # Shorthands ---------------------------------------------------------------------------
    def exact(self, name: str, measured: Any, expected: Any, *, kind: str, digits: int = 3,
              finite: bool = True, fails_if: str | None = None) -> bool:
        """``measured == expected`` exactly (integers, ranks, sympy results, booleans)."""
        if hasattr(measured, "equals") and not isinstance(measured, (str, bytes)) and not hasattr(measured, "numel"):
            passed = measured == expected          # sympy: structural equality after simplification
        elif _elements(measured) > 1 or _elements(expected) > 1:
            import torch                           # arrays: every element (their text is abridged)
            a, b = torch.as_tensor(measured), torch.as_tensor(expected)
            passed = a.shape == b.shape and torch.equal(a, b.to(a.dtype))
        else:
            passed = _number(measured) == _number(expected)
        return self.check(name, bool(passed), kind=kind, measured=measured,
                          held_to=f"= {format_value(expected, digits)}", digits=digits, agree=EXACT, finite=finite,
                          fails_if=fails_if)

    def close(self, name: str, measured: Any, target: Any, tol: Any, *, kind: str, digits: int = 3,
              agree: str | None = None, **statistical: Any) -> bool:
        """``|measured − target| ≤ tol``. A statistical check passes ``bound=`` and
        ``failure_probability=`` (the tolerance is then that bound's half-width)."""
        m, t, e = float(_number(measured)), float(_number(target)), float(_number(tol))
        passed = math.isfinite(m) and abs(m - t) <= e
        return self.check(name, passed, kind=kind, measured=m, digits=digits + 3, agree=agree,
                          held_to=f"{format_value(t, digits + 3)} ± {format_value(e, 2)}", **statistical)

    def at_most(self, name: str, measured: Any, limit: Any, *, kind: str, digits: int = 3,
                agree: str | None = None, se: Any = None, **statistical: Any) -> bool:
        """``measured ≤ limit`` (an error, a distance, a residual …). A statistical check passes
        ``bound=`` (the bound's type) and ``failure_probability=``. A numerical or parity residual
        below a tenth of ``limit`` is round-off by default: its digits may differ on another machine.

        With a ``bound``, ``measured`` is an interval's end held against a value: an exclusion
        (``excludes=True`` by default, its level bounds a wrong pass), whose margin is
        ``(limit − measured) / se`` in standard errors when ``se`` is given (or ``margin_se=``, one
        per step of a union); without either its false-failure rate is listed as not stated.
        ``excludes=False`` says otherwise (a statistic against its own radius, e.g. a KS distance)."""
        m, b = float(_number(measured)), float(_number(limit))
        passed = not math.isnan(m) and m <= b
        if agree is None and kind in (NUMERICAL, PARITY) and math.isfinite(b):
            agree = relative(floor=abs(b) / 10)
        return self.check(name, passed, kind=kind, measured=m, held_to=f"≤ {format_value(b, digits)}",
                          digits=digits, agree=agree, **_one_sided(name, b - m, se, statistical, kind))

    def at_least(self, name: str, measured: Any, limit: Any, *, kind: str, digits: int = 3,
                 agree: str | None = None, se: Any = None, **statistical: Any) -> bool:
        """``measured ≥ limit``. With a ``bound`` an exclusion by default, as for :meth:`at_most`
        (margin ``(measured − limit) / se``)."""
        m, b = float(_number(measured)), float(_number(limit))
        passed = not math.isnan(m) and m >= b
        return self.check(name, passed, kind=kind, measured=m, held_to=f"≥ {format_value(b, digits)}",
                          digits=digits, agree=agree, **_one_sided(name, m - b, se, statistical, kind))

    def true(self, name: str, passed: Any, *, kind: str, measured: Any = None, held_to: str = "true",
             agree: str | None = None, finite: bool = True, fails_if: str | None = None) -> bool:
        """A computed boolean (a set equality, a ranking agreement …), with what it measured."""
        passed = _boolean("passed", passed)
        return self.check(name, passed, kind=kind, measured=passed if measured is None else measured,
                          held_to=held_to, agree=agree, finite=finite, fails_if=fails_if)

    def within(self, name: str, target: Any, interval: Any, *, digits: int = 3,
               fails_if: str | None = None) -> bool:
        """A statistical check: ``target`` (the value the claim predicts) lies in ``interval``, an
        :class:`attnref.analysis.stats.Interval` (estimate, low, high, bound, failure probability).

        ``interval`` may be a sequence of intervals (one bound): every one must contain its target
        (``target`` one value for all, or one per interval); the check's failure probability is the
        sum of theirs (a union bound), and the measured column shows each. If the claim holds, the
        check fails only when an interval misses its true value: at most that sum."""
        union = _intervals(name, interval, "interval")
        targets = _per_interval(name, "target", target, len(union))
        passed = all(iv.low <= t <= iv.high for iv, t in zip(union, targets))
        bound, failure_probability = _union(name, union)
        same = len(set(targets)) == 1
        held_to = f"∋ {format_value(targets[0], digits + 2)}" if same else \
            "∋ " + "; ".join(format_value(t, digits + 2) for t in targets)
        return self.check(name, bool(passed), kind=STATISTICAL, measured=_intervals_text(union, digits),
                          held_to=("each " if len(union) > 1 and same else "") + held_to, bound=bound,
                          failure_probability=failure_probability, agree=relative(), fails_if=fails_if)

    def beyond(self, name: str, value: Any, interval: Any, *, side: str = "both", digits: int = 3,
               fails_if: str | None = None, se: Any = None, false_failure: Any = None,
               false_failure_basis: str | None = None) -> bool:
        """A statistical check that a value is excluded: ``value`` lies outside ``interval``
        (``side="below"``: the interval lies wholly above the value; ``"above"``: wholly below).

        ``interval`` may be a sequence of intervals (one bound): every one must exclude its value
        (``value`` one for all or one per interval); the failure probability is the sum of theirs.

        The failure probability bounds a wrong *pass* (the value is not on that side, yet every
        interval excludes it). The margin — the distance from the value to the interval's near
        end — is recorded in standard errors, from ``se`` (one per interval, or one for all) or
        else the interval's own ``standard_error``; from it the false-failure rate (a re-run fails
        though the claim holds: :func:`false_failure_normal`, summed over the intervals), unless
        ``false_failure`` (with its ``false_failure_basis``) is given."""
        if side not in ("both", "below", "above"):
            raise ValueError(f"{name}: side must be 'both', 'below' or 'above', got {side!r}")
        union = _intervals(name, interval, "interval")
        values = _per_interval(name, "value", value, len(union))
        margins = []
        for iv, v in zip(union, values):
            below_gap, above_gap = iv.low - v, v - iv.high     # > 0: the interval lies above / below v
            margins.append({"both": max(below_gap, above_gap), "below": below_gap, "above": above_gap}[side])
        passed = all(m > 0 for m in margins)                    # NaN compares False: never passes
        errors = _per_interval(name, "se", se, len(union)) if se is not None else \
            [getattr(iv, "standard_error", None) for iv in union]
        margin_se = None
        if all(e is not None for e in errors):
            errors = [float(_number(e)) for e in errors]
            if any(e < 0 for e in errors):
                raise ValueError(f"{name}: se must be ≥ 0, got {errors}")
        if all(e is not None for e in errors) and all(math.isfinite(e) for e in errors):
            # (a NaN standard error, from NaN data: no margin; the check fails on its NaN interval)
            scaled = [m / e if e > 0 else (math.inf if m > 0 else -math.inf) for m, e in zip(margins, errors)]
            if all(math.isfinite(x) or not math.isnan(x) for x in scaled):
                margin_se = min(scaled)
                if false_failure is None:                       # an infinite margin: 0
                    false_failure = min(1.0, math.fsum(false_failure_normal(x) for x in scaled))
                    false_failure_basis = false_failure_basis or NORMAL_AT_ESTIMATE
        relation = {"both": "∌", "below": "above", "above": "below"}[side]
        same = len(set(values)) == 1
        held_to = f"{relation} {format_value(values[0], digits + 2)}" if same else \
            f"{relation} " + "; ".join(format_value(v, digits + 2) for v in values)
        bound, failure_probability = _union(name, union)
        return self.check(name, passed, kind=STATISTICAL, measured=_intervals_text(union, digits),
                          held_to=("each " if len(union) > 1 and same else "") + held_to, bound=bound,
                          failure_probability=failure_probability, agree=relative(), fails_if=fails_if,
                          excludes=True, margin_se=margin_se if margin_se is None or math.isfinite(margin_se)
                          else None, false_failure=false_failure, false_failure_basis=false_failure_basis)


#: How :func:`false_failure_normal` obtains a false-failure rate (the default basis).
NORMAL_AT_ESTIMATE = "normal approximation, true value at the estimate"


def false_failure_normal(margin_se: float) -> float:
    """The probability that a re-run of an exclusion check fails though the claim holds, if the
    true value sat at the estimate and the estimate were normal with the recorded standard error:
    the re-run's interval end moves by more than the margin toward the value, Φ(−margin_se).
    (A nominal rate: the estimate is itself random; a margin of 5 SE gives 3·10⁻⁷, 2.6 SE 0.5 %.)"""
    x = float(margin_se)
    if math.isnan(x):
        raise ValueError(f"margin_se must be a number, got {margin_se!r}")
    return 0.5 * math.erfc(x / math.sqrt(2))


def _intervals(name: str, interval: Any, argument: str) -> list:
    """One interval or a non-empty sequence of them, checked to look like stats.Interval."""
    union = list(interval) if isinstance(interval, (list, tuple)) else [interval]
    if not union:
        raise ValueError(f"{name}: {argument} is an empty sequence; pass at least one interval")
    for iv in union:
        if not all(hasattr(iv, a) for a in ("estimate", "low", "high", "bound", "failure_probability")):
            raise ValueError(f"{name}: {argument} must be stats.Interval objects (estimate, low, high, bound, "
                             f"failure_probability), got {type(iv).__name__}")
    return union


def _union(name: str, union: list) -> tuple[str, float]:
    """The common bound of the intervals and the sum of their failure probabilities."""
    bounds = list(dict.fromkeys(iv.bound for iv in union))
    if len(bounds) != 1 and not all(b in GUARANTEED_BOUNDS for b in bounds):
        raise ValueError(f"{name}: the intervals of one check share one bound, or all have guaranteed bounds "
                         f"(their failure probabilities are then summed), got {bounds}")
    return BOUND_JOIN.join(bounds), math.fsum(float(iv.failure_probability) for iv in union)


def _per_interval(name: str, argument: str, value: Any, count: int) -> list[float]:
    """A value for each of ``count`` intervals: one for all, or a sequence of ``count``."""
    values = list(value) if isinstance(value, (list, tuple)) else [value] * count
    if len(values) != count:
        raise ValueError(f"{name}: {argument} has {len(values)} values for {count} intervals")
    return [float(_number(v)) for v in values]


def _intervals_text(union: list, digits: int) -> str:
    return "; ".join(f"{format_value(iv.estimate, digits)} [{format_value(iv.low, digits)}, "
                     f"{format_value(iv.high, digits)}]" for iv in union)


def _one_sided(name: str, gap: float, se: Any, statistical: dict, kind: str) -> dict:
    """The keywords of an at_least / at_most check: with a bound, an exclusion unless it says
    ``excludes=False``; ``se`` gives its margin, ``gap / se`` standard errors. (A training run's t
    interval, kind TRAINING, states its own: chapter 8 records its decisions' margins itself.)"""
    statistical = dict(statistical)
    if kind != TRAINING and (statistical.get("bound") is not None or statistical.get("intervals") is not None):
        statistical.setdefault("excludes", True)
    if se is not None:
        if statistical.get("margin_se") is not None:
            raise ValueError(f"{name}: pass se= or margin_se=, not both")
        error = _optional_real(name, "se", se)
        if not error >= 0:
            raise ValueError(f"{name}: se must be ≥ 0, got {se!r}")
        statistical["margin_se"] = gap / error if error > 0 else (math.inf if gap > 0 else -math.inf)
        statistical.setdefault("excludes", True)
    return statistical


def _margins(name: str, value: Any) -> list[float] | None:
    """``margin_se`` as a list: one margin, or one per step of a check over several intervals (a
    sequence, or a tensor of more than one element)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) or _elements(value) > 1:
        values = [_optional_real(name, "margin_se", v) for v in (value.tolist() if hasattr(value, "tolist")
                                                                 and not isinstance(value, (list, tuple)) else value)]
        if not values:
            raise ValueError(f"{name}: margin_se is an empty sequence; pass at least one margin")
        return values
    return [_optional_real(name, "margin_se", value)]


def _optional_real(name: str, argument: str, value: Any) -> float | None:
    if value is None:
        return None
    number = _number(value)
    if not isinstance(number, (int, float)) or isinstance(number, bool):
        raise ValueError(f"{name}: {argument} must be a number, got {value!r}")
    return float(number)


_NONFINITE = re.compile(r"NaN|nan|∞|\binf\b")


class Evidence(_Recorder):
    """The checks of one claim (or of one recheck on a trained model), and its verdict.

    ``Evidence("Q1")`` collects checks of the claim as stated (the methods of
    :class:`_Recorder`); ``.counterexample`` and ``.under("condition")`` record the others.
    ``model="all-MiniLM-L6-v2"`` makes it a recheck of the claim on that trained model.
    """

    def __init__(self, claim_id: str, model: str | None = None):
        self.claim = claim(claim_id)
        if model is not None and model not in MODELS:
            raise ValueError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
        self.model = model
        self.checks: list[Check] = []
        super().__init__(self, STATED)

    def _add(self, entry: Check) -> None:
        if any(c.name == entry.name and c.condition == entry.condition for c in self.checks):
            raise ValueError(f"{self.claim.id}: a check named {entry.name!r} is already recorded")
        self.checks.append(entry)

    @property
    def premise_fails(self) -> _Recorder:
        """Records checks (recheck on a trained model only) showing that the claim's premise does
        not hold in this model: each passes when the premise is violated. If they all pass, the
        verdict is :data:`PREMISE_FAILS`: the claim is not tested here, whatever else was measured."""
        if self.model is None:
            raise ValueError(f"{self.claim.id}: premise_fails is for rechecks on a trained model (model=…)")
        return _Recorder(self, PREMISE)

    @property
    def supporting(self) -> _Recorder:
        """Records a parity or identity the other checks rely on (attnref against torch, a formula
        against its loop transcription): it must pass, but it neither proves nor refutes the claim."""
        return _Recorder(self, SUPPORTING)

    @property
    def demonstration(self) -> _Recorder:
        """Records a check shown beside the evidence that does not vote (e.g. a CLT band failing on
        heavy tails, shown to explain why the book uses another bound)."""
        return _Recorder(self, DEMONSTRATION)

    @property
    def counterexample(self) -> _Recorder:
        """Records checks that exhibit a counterexample to the claim as stated."""
        return _Recorder(self, COUNTEREXAMPLE)

    def under(self, condition: str) -> _Recorder:
        """Records checks of the claim restricted to a named condition."""
        if not isinstance(condition, str) or not condition.strip():
            raise ValueError(f"condition must be a non-empty string, got {condition!r}")
        return _Recorder(self, CONDITION, condition)

    def verdict(self, reason: str) -> "Verdict":
        """The verdict by the rule, displayed with ``reason`` (one sentence, MyST inline markdown,
        numbers formatted from variables) and the evidence table."""
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError("reason must be a non-empty sentence")
        result = Verdict(self.claim, self.model, decide(self.checks), " ".join(reason.split()), tuple(self.checks))
        _computed[(self.claim.id, self.model)] = result
        return result


_computed: dict[tuple[str, str | None], "Verdict"] = {}


def computed() -> list[dict]:
    """Every verdict computed in this Python session, for the test harness: id, model, verdict,
    expected, and the failing checks (what ``make test`` reports when a verdict is not the
    expected one)."""
    out = []
    for (claim_id, model), v in _computed.items():
        out.append({"id": claim_id, "model": model, "verdict": v.verdict, "expected": v.metadata.get("expected"),
                    "failing": [{"name": c.name, "measured": c.measured, "held_to": c.held_to, "bears_on": c.bears_on,
                                 "condition": c.condition} for c in v.failing]})
    return out


def forget() -> None:
    """Forget the verdicts computed so far (before a notebook is run again, e.g. for another seed)."""
    _computed.clear()


def decide(checks) -> str:
    """The rule: recorded checks → one of :data:`ALL_VERDICTS` (see the module docstring).
    Demonstrations do not vote; a supporting check that fails makes the evidence *not
    established* (the other checks rely on it), and one that passes decides nothing."""
    checks = [c for c in checks if c.bears_on != DEMONSTRATION]
    if not all(c.passed for c in checks if c.bears_on == SUPPORTING):
        return NOT_ESTABLISHED
    checks = [c for c in checks if c.bears_on != SUPPORTING]
    premise = [c for c in checks if c.bears_on == PREMISE]
    if premise:
        return PREMISE_FAILS if all(c.passed for c in premise) else NOT_ESTABLISHED
    stated = [c for c in checks if c.bears_on == STATED]
    conditioned = [c for c in checks if c.bears_on == CONDITION]
    counter = [c for c in checks if c.bears_on == COUNTEREXAMPLE]
    if not checks:
        return NOT_ESTABLISHED
    if counter:
        if not all(c.passed for c in counter):
            return NOT_ESTABLISHED          # a recorded counterexample must hold, every check of it
        if stated and all(c.passed for c in stated):
            return NOT_ESTABLISHED          # the claim held as stated and was refuted: contradictory
        if not conditioned:
            return FAILS
        return CONDITIONS if all(c.passed for c in conditioned) else NOT_ESTABLISHED
    if stated and all(c.passed for c in stated) and all(c.passed for c in conditioned):
        return HOLDS
    return NOT_ESTABLISHED


def conditions_of(checks) -> list[str]:
    """The named conditions, in the order the checks name them."""
    return list(dict.fromkeys(c.condition for c in checks if c.bears_on == CONDITION and c.condition))


def deciding(checks, verdict: str) -> list[Check]:
    """The checks that moved the verdict: the counterexamples that passed (does not hold, holds
    under conditions), the failing checks (not established), else every check of the claim as stated."""
    checks = list(checks)
    if verdict == NOT_ESTABLISHED:
        return [c for c in checks if not c.passed and c.bears_on != DEMONSTRATION] or checks
    if verdict in (FAILS, CONDITIONS):
        return [c for c in checks if c.bears_on == COUNTEREXAMPLE and c.passed]
    if verdict == PREMISE_FAILS:
        return [c for c in checks if c.bears_on == PREMISE]
    return [c for c in checks if c.bears_on == STATED]


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _as_dict(c) -> dict:
    return c if isinstance(c, dict) else c.as_dict()


def check_label(c) -> str:
    """A check's name as the evidence table shows it, with its role."""
    c = _as_dict(c)
    prefix = {COUNTEREXAMPLE: "*counterexample:* ", SUPPORTING: "*supporting:* ", PREMISE: "*premise fails:* ",
              DEMONSTRATION: "*demonstration, does not vote:* "}.get(c["bears_on"], "")
    if c["bears_on"] == CONDITION:
        prefix = f"*if {c['condition']}:* "
    return prefix + c["name"]


def _recorded_level(c: dict) -> bool:
    """Whether a check (dict) records a bound with a level: a statistical check always does; a
    check of another kind (a training run's t interval) when it names one."""
    return bool(c.get("bound")) and c.get("failure_probability") is not None


#: Below this a false-failure rate is shown as "< 10⁻¹⁵" (its digits are not meaningful).
NEGLIGIBLE_FALSE_FAILURE = 1e-15


def false_failure_text(rate: float | None) -> str:
    """A false-failure rate as shown: "≈ 3·10⁻⁷", "< 10⁻¹⁵", or "not stated"."""
    if rate is None:
        return "not stated"
    if rate < NEGLIGIBLE_FALSE_FAILURE:
        return f"< {format_value(NEGLIGIBLE_FALSE_FAILURE, 1)}"
    return f"≈ {format_value(rate, 1)}"


def kind_label(c) -> str:
    """A check's kind; for a check that records a bound (every statistical check, a training
    check with its t interval) the bound and its failure probability (guaranteed bounds) or
    nominal level (the others); for an exclusion or ordering check its margin in standard errors
    and its false-failure rate."""
    c = _as_dict(c)
    if not _recorded_level(c):
        return c["kind"]
    level = format_value(c["failure_probability"], 1)
    if is_guaranteed(c["bound"]):
        text = f"{c['kind']} ({c['bound']}, failure prob. ≤ {level}"
    else:
        text = f"{c['kind']} ({c['bound']}, nominal level {level}"
    if c.get("excludes"):
        margin = c.get("margin_se")
        text += "; " + (f"margin {format_value(margin, 2)} SE, " if margin is not None else "") \
            + f"false failure {false_failure_text(c.get('false_failure'))}"
    return text + ")"


def levels(checks) -> dict:
    """The checks that record a bound and vote: the summed failure probability of the guaranteed
    ones (a union bound: every interval covers its true value with probability at least one minus
    it), the names of the nominal ones, and for the exclusion and ordering checks among them
    (whose failure probability bounds a wrong pass) the summed false-failure rate, the smallest
    margin in standard errors, and the names of those that state no false-failure rate."""
    voting = [_as_dict(c) for c in checks if _recorded_level(_as_dict(c))
              and _as_dict(c)["bears_on"] != DEMONSTRATION]
    guaranteed = [c for c in voting if is_guaranteed(c["bound"])]
    exclusions = [c for c in voting if c.get("excludes")]
    stated = [c for c in exclusions if c.get("false_failure") is not None]
    margins = [c["margin_se"] for c in exclusions if c.get("margin_se") is not None]
    return {"guaranteed": len(guaranteed),
            "failure_probability": math.fsum(c["failure_probability"] for c in guaranteed),
            "nominal": [c["name"] for c in voting if not is_guaranteed(c["bound"])],
            "exclusions": len(exclusions),
            "false_failure": min(1.0, math.fsum(c["false_failure"] for c in stated)) if stated else None,
            "smallest_margin_se": min(margins) if margins else None,
            "false_failure_not_stated": [c["name"] for c in exclusions if c.get("false_failure") is None]}


def levels_sentence(checks) -> str:
    """One sentence on the statistical levels of a claim's evidence ('' without checks that record a
    bound). The failure probabilities bound the chance that an interval misses its true value;
    that is a wrong *fail* of a check "the interval contains the predicted value" but a wrong
    *pass* of an exclusion or ordering check, whose wrong fail is its false-failure rate."""
    info = levels(checks)
    voting = [_as_dict(c) for c in checks if _recorded_level(_as_dict(c))
              and _as_dict(c)["bears_on"] != DEMONSTRATION]
    parts = []
    if info["guaranteed"]:
        parts.append(f"{info['guaranteed']} check{'s' if info['guaranteed'] > 1 else ''} with guaranteed "
                     f"levels: every interval covers its true value with probability at least "
                     f"1 − {format_value(info['failure_probability'], 2)} (union bound)")
    if info["nominal"]:
        n = len(info["nominal"])
        named = [f"{c['name']} ({format_value(c['failure_probability'], 2)})" for c in voting
                 if not is_guaranteed(c["bound"])]
        parts.append(f"{n} with nominal levels only (asymptotic or assuming normality): " + "; ".join(named))
    if info["exclusions"]:
        n = info["exclusions"]
        text = (f"{n} {'is an exclusion or ordering check' if n == 1 else 'are exclusion or ordering checks'}"
                f" (its level bounds a wrong pass)" if n == 1 else
                f"{n} are exclusion or ordering checks (their levels bound a wrong pass)")
        if info["false_failure"] is not None:
            margin = info["smallest_margin_se"]
            text += (f"; the chance that a re-run fails {'it' if n == 1 else 'one'} though the claim holds is "
                     f"{false_failure_text(info['false_failure'])}"
                     + " (" + "; ".join(([f"smallest margin {format_value(margin, 2)} standard errors"]
                                         if margin is not None else [])
                                        + list(dict.fromkeys(_as_dict(c).get("false_failure_basis") or ""
                                                             for c in voting if _as_dict(c).get("excludes")
                                                             and _as_dict(c).get("false_failure") is not None)))
                     + ")")
        if info["false_failure_not_stated"]:
            text += "; no false-failure rate stated for: " + "; ".join(info["false_failure_not_stated"])
        parts.append(text)
    return ("*Levels:* " + ". ".join(parts) + ".") if parts else ""


def evidence_table(checks, mask_measured: bool = False) -> str:
    """The evidence as a markdown table: check · kind · measured · held to · passed (and
    "fails if" when a check names what it rules out). ``checks`` are :class:`Check` objects or
    their dicts (a stored verdict's metadata); ``mask_measured`` shows "…" for a measured value that
    may differ on another machine (``agree`` is not EXACT)."""
    checks = [_as_dict(c) for c in checks]
    with_fails_if = any(c.get("fails_if") for c in checks)
    lines = ["| Check | Kind | Measured | Held to | Passed |" + (" Fails if |" if with_fails_if else ""),
             "| :--- | :--- | ---: | :--- | :---: |" + (" :--- |" if with_fails_if else "")]
    for c in checks:
        measured = "…" if mask_measured and c.get("agree", EXACT) != EXACT else c["measured"]
        row = (f"| {_cell(check_label(c))} | {_cell(kind_label(c))} | {_cell(measured)} | {_cell(c['held_to'])} | "
               f"{'✓' if c['passed'] else '✗'} |")
        if with_fails_if:
            row += f" {_cell(c.get('fails_if') or '—')} |"
        lines.append(row)
    return "\n".join(lines)


def render_markdown(metadata: dict, mask_measured: bool = False) -> str:
    """A verdict output's markdown, from its metadata alone (so that comparing the metadata of a
    stored output with a re-run's compares everything the reader sees)."""
    where = f" on {metadata['model']}" if metadata.get("model") else ""
    text = f"**{metadata['id']}{where}: {metadata['verdict']}.**"
    if metadata.get("conditions"):
        text += " *Conditions:* " + "; ".join(metadata["conditions"]) + "."
    text += f" {metadata['reason']}\n\n" + evidence_table(metadata["checks"], mask_measured)
    sentence = levels_sentence(metadata["checks"])
    return text + (f"\n\n{sentence}" if sentence else "")


@dataclass
class Verdict:
    """A computed verdict; displays itself (verdict, reason, evidence) and carries the metadata
    the book's verdict boxes and claims index are generated from."""

    claim: Claim
    model: str | None
    verdict: str
    reason: str
    checks: tuple[Check, ...]
    metadata: dict = field(default_factory=dict)

    def __post_init__(self):
        self.metadata = {
            "id": self.claim.id, "chapter": self.claim.chapter if self.model is None else 6,
            "model": self.model, "real_model": self.model is not None,
            "verdict": self.verdict, "expected": expected_verdict(self.claim.id, self.model)
            if self.model is None or (self.claim.id, self.model) in RECHECKS else None,
            "reason": self.reason, "conditions": conditions_of(self.checks),
            "kinds": list(dict.fromkeys(c.kind for c in self.checks)),
            "levels": levels(self.checks),
            "checks": [c.as_dict() for c in self.checks],
        }

    @property
    def conditions(self) -> list[str]:
        return conditions_of(self.checks)

    @property
    def failing(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def markdown(self) -> str:
        return render_markdown(self.metadata)

    def _repr_mimebundle_(self, include=None, exclude=None):
        where = f" on {self.model}" if self.model else ""
        plain = f"{self.claim.id}{where}: {self.verdict} ({sum(c.passed for c in self.checks)}/{len(self.checks)} checks passed)"
        return {"text/markdown": self.markdown(), "text/plain": plain}, {METADATA_KEY: self.metadata}
