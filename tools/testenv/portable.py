"""Comparing a notebook's stored outputs with a re-run on another machine.

The last bits of a float depend on which CPU kernels torch picks (AVX-512, AVX2 or the default
path, chosen per machine) and on the BLAS path, so a round-off residual stored as 3.09·10⁻¹⁶ can
re-run as 1.54·10⁻¹⁶. What a reader must see identically compares exactly; the rest within a
tolerance that belongs to what is compared:

* **Verdict outputs** (metadata ``attnref_verdict``): the verdict, the expected verdict, the
  conditions, and per check its name, kind, bearing, bound, failure probability, what it is held
  to and whether it passed — exactly. The measured value within the check's own agreement rule
  (``Check.agree``, stated where the check is recorded: ``claims.EXACT`` or
  ``claims.relative(r, floor)``). The markdown a reader sees must be the one rendered from the
  metadata (``claims.render_markdown``), on both sides, so nothing on the page escapes the
  comparison.
* **Every other text** (printed lines, markdown, plain text): the text between numbers exactly;
  integers exactly; a number printed with a decimal point or an exponent within one unit of its
  last printed digit (the value behind "0.812" may re-run as 0.81250000001 and print "0.813":
  the printed precision is all the text carries). A round-off residual has no business in such
  text: print the bound it is held to instead.
* Figures (PNG, JPEG, SVG, PDF) are not compared, as in nbval; their alt text is.

This module needs only the standard library and ``attnref/book/claims.py`` (loaded by path):
the pytest controller never imports torch.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERDICT_KEY = "attnref_verdict"
IMAGES = ("image/png", "image/jpeg", "image/svg+xml", "application/pdf")


def _load_claims():
    spec = importlib.util.spec_from_file_location("attnref_claims_for_comparison", ROOT / "attnref" / "book" / "claims.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module             # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


claims = _load_claims()

_SUPER = str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789")
# A number as the notebooks print it: 3.09·10⁻¹⁶, 10⁻¹², 4.5e-07, −0.003, 0.812, 1064960, 2.
NUMBER = re.compile(
    r"(?P<sign>[−-])?(?:"
    r"(?P<mant>\d+(?:\.\d+)?)·10(?P<sexp>⁻?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)"      # 3.09·10⁻¹⁶
    r"|(?<![\d.])10(?P<pexp>⁻?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)"                  # 10⁻¹²
    r"|(?P<emant>\d+(?:\.\d+)?)[eE](?P<eexp>[+-]?\d+)"         # 4.5e-07
    r"|(?P<dec>\d+\.\d+)"                                     # 0.812
    r"|(?P<int>\d+)"                                          # 2, 1064960
    r")")


def _decimals(text: str) -> int:
    return len(text.split(".", 1)[1]) if "." in text else 0


def parse_number(match: re.Match) -> tuple[float, float]:
    """(value, one unit of the last printed digit); the unit is 0 for an integer or a bare power of
    ten (compared exactly)."""
    sign = -1.0 if match.group("sign") else 1.0
    if match.group("mant") is not None:
        mantissa, exponent = match.group("mant"), int(match.group("sexp").translate(_SUPER))
    elif match.group("pexp") is not None:              # a bare power of ten is a bound or a class:
        return sign * 10.0 ** int(match.group("pexp").translate(_SUPER)), 0.0      # compared exactly
    elif match.group("emant") is not None:
        mantissa, exponent = match.group("emant"), int(match.group("eexp"))
    elif match.group("dec") is not None:
        mantissa, exponent = match.group("dec"), 0
    else:
        return sign * float(match.group("int")), 0.0
    unit = 10.0 ** (exponent - _decimals(mantissa))
    return sign * float(mantissa) * 10.0 ** exponent, unit


def texts_agree(stored: str, new: str) -> list[str]:
    """Problems (none: agree) between two printed texts: the words exactly, integers exactly,
    other numbers within one unit of the last printed digit."""
    if stored == new:
        return []
    a, b = list(NUMBER.finditer(stored)), list(NUMBER.finditer(new))
    skeleton_a, skeleton_b = NUMBER.sub("#", stored), NUMBER.sub("#", new)
    if skeleton_a != skeleton_b or len(a) != len(b):
        return [_first_difference(stored, new)]
    problems = []
    for x, y in zip(a, b):
        (va, ua), (vb, ub) = parse_number(x), parse_number(y)
        unit = max(ua, ub)
        if unit == 0.0 and x.group(0) != y.group(0):
            problems.append(f"the integer or power {x.group(0)} is {y.group(0)} in the re-run: …{_around(new, y)}…")
        elif abs(va - vb) > unit * (1 + 1e-9):
            problems.append(f"{x.group(0)} is {y.group(0)} in the re-run (more than one unit of its last "
                            f"printed digit): …{_around(new, y)}…")
    return problems


def _around(text: str, match: re.Match, width: int = 40) -> str:
    return text[max(0, match.start() - width):match.end() + width].replace("\n", "⏎")


def _first_difference(stored: str, new: str) -> str:
    i = next((k for k, (x, y) in enumerate(zip(stored, new)) if x != y), min(len(stored), len(new)))
    return (f"the text differs beyond its numbers at character {i}:\n    stored: …{stored[max(0, i - 60):i + 60]!r}…"
            f"\n    re-run: …{new[max(0, i - 60):i + 60]!r}…")


def checks_agree(claim: str, stored: dict, new: dict) -> list[str]:
    """Problems between a stored check (a dict of ``claims.Check``) and its re-run."""
    where = f"{claim}, check {stored.get('name')!r}"
    problems = []
    for key in ("name", "kind", "bears_on", "condition", "bound", "failure_probability", "held_to", "passed", "agree",
                "excludes", "false_failure_basis"):
        if stored.get(key) != new.get(key):
            problems.append(f"{where}: {key} is {stored.get(key)!r} stored, {new.get(key)!r} in the re-run")
    # an exclusion check's margin and false-failure rate follow its measured values
    if not claims.margins_agree(stored.get("margin_se"), new.get("margin_se")):
        problems.append(f"{where}: margin_se is {stored.get('margin_se')!r} stored, {new.get('margin_se')!r} in the re-run")
    if not claims.false_failures_agree(stored.get("false_failure"), new.get("false_failure")):
        problems.append(f"{where}: false_failure is {stored.get('false_failure')!r} stored, "
                        f"{new.get('false_failure')!r} in the re-run")
    if problems:
        return problems
    rule = stored.get("agree", claims.EXACT)
    a, b = stored.get("value"), new.get("value")
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    if rule == claims.EXACT:
        if stored.get("measured") != new.get("measured") or a != b:
            problems.append(f"{where}: measured {stored.get('measured')} stored, {new.get('measured')} in the re-run "
                            f"(compared exactly)")
    elif numeric:
        if not claims.values_agree(rule, a, b):
            problems.append(f"{where}: measured {a!r} stored, {b!r} in the re-run: not within its rule {rule!r}")
    else:
        problems += [f"{where}: {p}" for p in texts_agree(str(stored.get("measured")), str(new.get("measured")))]
    return problems


def verdicts_agree(stored: dict, new: dict) -> list[str]:
    """Problems between a stored verdict's metadata and its re-run's."""
    claim = stored.get("id", "?") + (f" on {stored['model']}" if stored.get("model") else "")
    problems = []
    for key in ("id", "chapter", "model", "real_model", "verdict", "expected", "conditions", "kinds"):
        if stored.get(key) != new.get(key):
            problems.append(f"{claim}: {key} is {stored.get(key)!r} stored, {new.get(key)!r} in the re-run")
    problems += _levels_agree(claim, stored.get("levels") or {}, new.get("levels") or {})
    problems += [f"{claim}, reason: {p}" for p in texts_agree(stored.get("reason", ""), new.get("reason", ""))]
    old_checks, new_checks = stored.get("checks", []), new.get("checks", [])
    if [c.get("name") for c in old_checks] != [c.get("name") for c in new_checks]:
        problems.append(f"{claim}: the checks are {[c.get('name') for c in old_checks]} stored, "
                        f"{[c.get('name') for c in new_checks]} in the re-run")
        return problems
    for old, again in zip(old_checks, new_checks):
        problems += checks_agree(claim, old, again)
    return problems


def _levels_agree(claim: str, stored: dict, new: dict) -> list[str]:
    """A verdict's levels: counts, names and guaranteed failure probabilities exactly; the summed
    false-failure rate and the smallest margin of its exclusion checks as those of a check."""
    tolerant = {"false_failure": claims.false_failures_agree, "smallest_margin_se": claims.margins_agree}
    problems = []
    for key in sorted(set(stored) | set(new)):
        a, b = stored.get(key), new.get(key)
        agree = tolerant[key](a, b) if key in tolerant else a == b
        if not agree:
            problems.append(f"{claim}: levels[{key!r}] is {a!r} stored, {b!r} in the re-run")
    return problems


def _rendered(output: dict, side: str) -> list[str]:
    """A verdict output's markdown must be the one rendered from its metadata."""
    meta = output["metadata"][VERDICT_KEY]
    if output.get("data", {}).get("text/markdown") != claims.render_markdown(meta):
        return [f"{meta.get('id')}: the {side} markdown is not the one rendered from its metadata "
                f"(claims.render_markdown): a part of the page would escape the comparison"]
    return []


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def outputs_agree(stored: list[dict], new: list[dict], sanitize=lambda s: s) -> list[str]:
    """Problems between a cell's stored outputs and a re-run's (both with streams coalesced)."""
    if [o.get("output_type") for o in stored] != [o.get("output_type") for o in new]:
        return [f"the outputs are {[o.get('output_type') for o in stored]} stored, "
                f"{[o.get('output_type') for o in new]} in the re-run"]
    problems: list[str] = []
    for old, again in zip(stored, new):
        kind = old.get("output_type")
        if kind == "stream":
            if old.get("name") != again.get("name"):
                problems.append(f"a stream is {old.get('name')} stored, {again.get('name')} in the re-run")
            problems += texts_agree(sanitize(_text(old.get("text", ""))), sanitize(_text(again.get("text", ""))))
        elif kind in ("display_data", "execute_result"):
            problems += _display_agrees(old, again, sanitize)
        elif kind == "error":
            problems.append(f"the stored output holds an error: {old.get('ename')}")
    return problems


def _display_agrees(old: dict, again: dict, sanitize) -> list[str]:
    old_data, new_data = old.get("data", {}), again.get("data", {})
    if set(old_data) != set(new_data):
        return [f"the output's formats are {sorted(old_data)} stored, {sorted(new_data)} in the re-run"]
    old_meta = (old.get("metadata") or {}).get(VERDICT_KEY)
    new_meta = (again.get("metadata") or {}).get(VERDICT_KEY)
    if (old_meta is None) != (new_meta is None):
        return ["a verdict output in one run is not a verdict output in the other"]
    problems = []
    if old_meta is not None:
        problems += _rendered(old, "stored") + _rendered(again, "re-run's")
        problems += verdicts_agree(old_meta, new_meta)
    for mime in old_data:
        if mime in IMAGES or (old_meta is not None and mime == "text/markdown"):
            continue                    # figures as in nbval; a verdict's markdown is its metadata's
        problems += [f"{mime}: {p}" for p in texts_agree(sanitize(_text(old_data[mime])), sanitize(_text(new_data[mime])))]
    return problems
