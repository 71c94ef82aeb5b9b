"""The comparison of stored notebook outputs with a re-run (tools/testenv/portable.py, used by
nbval through tools/testenv/nbplugin.py): round-off may differ between machines, nothing else.

The end-to-end test builds a small notebook, stores its outputs, tampers with them the way a
wrong stored value, verdict or pass flag would look, re-runs it under nbval with other round-off
and checks that exactly the cells that must fail fail.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "testenv"))
import portable  # noqa: E402

claims = portable.claims


# ------------------------------------------------------------------------------------------
# Printed text
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stored,new", [
    ("slope 2.003", "slope 2.003"),
    ("slope 2.003", "slope 2.004"),                  # a rounding flip: one unit of the last digit
    ("σ = 3.09·10⁻¹⁶", "σ = 3.1·10⁻¹⁶"),             # 3.09 vs 3.10: one unit
    ("parity 4.5e-07", "parity 4.6e-07"),
    ("−0.003 [−0.010, +0.003]", "−0.004 [−0.010, +0.003]"),
])
def test_printed_numbers_may_differ_by_one_unit_of_their_last_digit(stored, new):
    assert portable.texts_agree(stored, new) == []


@pytest.mark.parametrize("stored,new,why", [
    ("slope 2.003", "slope 2.005", "more than one unit"),
    ("within 2.11·10⁻¹⁵", "within 2.66·10⁻¹⁵", "more than one unit"),   # round-off does not belong in text
    ("rank 64 of 64", "rank 63 of 64", "integer"),
    ("exact rank in 270 of 270 heads", "exact rank in 269 of 270 heads", "integer"),
    ("does not hold", "holds", "text differs"),
    ("below 10⁻¹²", "below 10⁻¹¹", "integer"),
    ("value 0.5", "value NaN", "text differs"),
])
def test_anything_else_in_printed_text_must_match(stored, new, why):
    problems = portable.texts_agree(stored, new)
    assert problems and why in problems[0]


def test_numbers_parse_with_their_printed_precision():
    cases = {"3.09·10⁻¹⁶": (3.09e-16, 1e-18), "10⁻¹²": (1e-12, 0.0), "4.5e-07": (4.5e-7, 1e-8),
             "−0.812": (-0.812, 1e-3), "270": (270.0, 0.0)}
    for text, (value, unit) in cases.items():
        parsed = portable.parse_number(portable.NUMBER.search(text))
        assert parsed == pytest.approx((value, unit), rel=1e-12), text


# ------------------------------------------------------------------------------------------
# Agreement rules of checks
# ------------------------------------------------------------------------------------------

def test_agreement_rules():
    roundoff = claims.relative(1e-9, floor=1e-13)
    assert claims.values_agree(roundoff, 3.09e-16, 1.54e-16)        # both round-off
    assert claims.values_agree(roundoff, 0.0, 8.88e-16)
    assert not claims.values_agree(roundoff, 3e-16, 2e-13)          # one of them is not
    assert claims.values_agree(claims.relative(), 0.8125, 0.8125 * (1 + 1e-12))
    assert not claims.values_agree(claims.relative(), 0.8125, 0.8125 * (1 + 1e-8))
    assert not claims.values_agree(claims.relative(), float("nan"), float("nan"))
    assert not claims.values_agree(claims.EXACT, float("nan"), float("nan"))
    assert claims.values_agree(claims.EXACT, 3, 3) and not claims.values_agree(claims.EXACT, 3, 4)
    with pytest.raises(ValueError, match="not an agreement rule"):
        claims.parse_agreement("roughly")


def test_each_recorder_states_its_default_rule():
    e = claims.Evidence("Q1")
    e.at_most("residual", 3e-16, 1e-12, kind=claims.PARITY)
    e.at_most("a measured distance", 0.2, 0.5, kind=claims.STATISTICAL, bound="Hoeffding", failure_probability=1e-7)
    e.exact("rank", 8, 8, kind=claims.NUMERICAL)
    e.close("slope", 2.003, 2, 0.01, kind=claims.NUMERICAL)
    e.true("symmetric", True, kind=claims.SYMBOLIC)
    rules = {c.name: c.agree for c in e.checks}
    assert rules == {"residual": "relative 1e-09 or both ≤ 1e-13", "a measured distance": "relative 1e-09",
                     "rank": "exact", "slope": "relative 1e-09", "symmetric": "exact"}


def test_a_non_finite_measurement_never_passes():
    e = claims.Evidence("Q1")
    assert not e.at_most("nan residual", float("nan"), 1e-12, kind=claims.PARITY)
    assert not e.at_least("inf ratio", float("inf"), 1.0, kind=claims.NUMERICAL)
    assert not e.true("a flag computed beside a NaN", True, kind=claims.NUMERICAL, measured=float("nan"))
    assert not e.check("an interval holding NaN", True, kind=claims.NUMERICAL, measured="0.3 [NaN, 0.5]")
    assert e.exact("E[x⁴] of t₃ (about a non-finite value)", float("inf"), float("inf"),
                   kind=claims.SYMBOLIC, finite=False)
    assert claims.decide(e.checks[:1]) == claims.NOT_ESTABLISHED


def _verdict_output(value: float, limit: float = 1e-12, verdict_edit=None) -> dict:
    e = claims.Evidence("Q1")
    e.at_most("|attnref − torch|", value, limit, kind=claims.PARITY)
    e.exact("degree", 2, 2, kind=claims.SYMBOLIC)
    v = e.verdict("the scores are quadratic.")
    data, meta = v._repr_mimebundle_()
    return {"output_type": "display_data", "data": data, "metadata": copy.deepcopy(meta)}


def test_verdict_outputs_compare_by_their_checks_rules():
    stored = _verdict_output(3.09e-16)
    assert portable.outputs_agree([stored], [_verdict_output(1.54e-16)]) == []
    problems = portable.outputs_agree([stored], [_verdict_output(5e-13)])
    assert any("|attnref − torch|" in p and "not within its rule" in p for p in problems)


def test_a_tampered_verdict_pass_flag_or_page_fails():
    new = _verdict_output(3.09e-16)
    flipped = _verdict_output(3.09e-16)
    flipped["metadata"]["attnref_verdict"]["verdict"] = "does not hold"
    flipped["data"]["text/markdown"] = claims.render_markdown(flipped["metadata"]["attnref_verdict"])
    assert any("verdict is 'does not hold' stored" in p for p in portable.outputs_agree([flipped], [new]))
    failed = _verdict_output(3.09e-16)
    failed["metadata"]["attnref_verdict"]["checks"][0]["passed"] = False
    failed["data"]["text/markdown"] = claims.render_markdown(failed["metadata"]["attnref_verdict"])
    assert any("passed is False stored" in p for p in portable.outputs_agree([failed], [new]))
    page = _verdict_output(3.09e-16)
    page["data"]["text/markdown"] = page["data"]["text/markdown"].replace("quadratic", "linear")
    assert any("not the one rendered" in p for p in portable.outputs_agree([page], [new]))


# ------------------------------------------------------------------------------------------
# End to end: nbval with the plugin, on a notebook whose "round-off" comes from the environment
# ------------------------------------------------------------------------------------------

CELLS = {
    "roundoff": "e = claims.Evidence('Q1')\n"
                "e.at_most('residual', float(os.environ['T_ROUNDOFF']), 1e-12, kind=claims.PARITY)\n"
                "e.verdict('a residual at round-off')",
    "moved": "e = claims.Evidence('Q2')\n"
             "e.at_most('a residual that moved', float(os.environ['T_MOVED']), 1e-9, kind=claims.PARITY)\n"
             "e.verdict('moved beyond its floor, still within its bound')",
    "verdict": "e = claims.Evidence('Q3')\ne.exact('rank', 2, 2, kind=claims.NUMERICAL)\ne.verdict('tampered verdict')",
    "flag": "e = claims.Evidence('Q4')\ne.exact('rank', 3, 3, kind=claims.NUMERICAL)\ne.verdict('tampered flag')",
    "print_ok": "print(f\"slope {float(os.environ['T_SLOPE']):.3g}\")",
    "print_moved": "print(f\"slope {float(os.environ['T_SLOPE_MOVED']):.3g}\")",
}
STORED = {"T_ROUNDOFF": "3.09e-16", "T_MOVED": "3e-16", "T_SLOPE": "0.8125", "T_SLOPE_MOVED": "0.8125"}
RERUN = {"T_ROUNDOFF": "8.8e-16", "T_MOVED": "5e-10", "T_SLOPE": "0.81250001", "T_SLOPE_MOVED": "0.8155"}
MUST_FAIL = {"moved", "verdict", "flag", "print_moved"}


def _run_notebook(nb, path: Path, env: dict) -> None:
    from nbclient import NotebookClient
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        NotebookClient(nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def test_nbval_passes_round_off_and_fails_every_other_change(tmp_path):
    path = tmp_path / "portable.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import os, sys\nsys.path.insert(0, os.environ['T_ROOT'])\n"
                                          "from attnref.book import claims")]
    nb.cells += [nbformat.v4.new_code_cell(source) for source in CELLS.values()]
    _run_notebook(nb, path, {**STORED, "T_ROOT": str(ROOT)})
    index = {name: i + 1 for i, name in enumerate(CELLS)}
    for name, edit in (("verdict", ("verdict", "does not hold")),):
        output = nb.cells[index[name]].outputs[0]
        output.metadata["attnref_verdict"][edit[0]] = edit[1]
        output.data["text/markdown"] = claims.render_markdown(output.metadata["attnref_verdict"])
    flag = nb.cells[index["flag"]].outputs[0]
    flag.metadata["attnref_verdict"]["checks"][0]["passed"] = False
    flag.data["text/markdown"] = claims.render_markdown(flag.metadata["attnref_verdict"])
    nbformat.write(nb, path)

    env = {**os.environ, **RERUN, "T_ROOT": str(ROOT),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tools" / "testenv"), os.environ.get("PYTHONPATH", "")])}
    report = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "nbplugin", "-p", "no:cacheprovider", "--nbval", "--nbval-current-env",
         "-q", "-o", "addopts=", f"--rootdir={tmp_path}", "--junitxml", str(report), str(path)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    failed = {line.split("::Cell ")[1].split()[0] for line in result.stdout.splitlines()
              if line.startswith("FAILED") and "::Cell " in line}
    assert failed == {str(index[name]) for name in MUST_FAIL}, result.stdout[-3000:]
