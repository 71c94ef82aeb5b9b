"""Chapter 8 on text: the QK-norm text model against an independent computation, the stored
comparisons against the committed amendment, and the text rechecks' verdicts against plausible bugs.

The verdict tests run the notebook's own text cells (its set-up cells, then every code cell that
starts with ``# on text``, after the claim sections they read) in this process on the stored data,
with one mutation each, and decide the text verdicts with ``claims.decide``.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from attnref.book import claims
from attnref.training import experiments as ex
from attnref.training import results, text_results
from attnref.training.models import Spec

import notebook_sections                     # tests/notebook_sections.py

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "08-training.ipynb"
MODEL = "Shakespeare-char-LM"
TEXT_IDS = ("E1", "E2", "E4", "E5", "E6", "E7")


# --- the QK-norm text layer ------------------------------------------------------------------------

def test_the_text_models_qk_norm_is_gemmas_rms_norm_with_unit_offset_gains():
    # the logits the softmax sees, against torch's rms_norm with the gains 1 + w and q·k/√d_k
    from attnref.training.text import TextModel
    F = torch.nn.functional
    model = TextModel(Spec(d=32, h=4, layers=1, d_ff=64, scores="qk_norm"), vocab=20, context=10, seed=0)
    layer = model.layers[0]
    with torch.no_grad():
        layer.q_norm.normal_(0, 0.3)
        layer.k_norm.normal_(0, 0.3)
    x = torch.randn(2, 10, 32)
    w = layer.weights()
    a = w.attention
    t = F.layer_norm(x, (32,), w.norm_1.gain, w.norm_1.bias, w.norm_1.eps)
    q = torch.einsum("bnd,hde->bhne", t, a.w_q) + a.b_q[:, None, :]
    k = torch.einsum("bnd,hde->bhne", t, a.w_k) + a.b_k[:, None, :]
    with torch.no_grad():
        want = (F.rms_norm(q, (8,), 1 + layer.q_norm, eps=1e-6)
                @ F.rms_norm(k, (8,), 1 + layer.k_norm, eps=1e-6).transpose(-1, -2)) / math.sqrt(8)
        got = layer.logits(t, a, q, k)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # and the attention the layer runs uses exactly these logits (causal softmax)
    layer.record_scores = True
    with torch.no_grad():
        result = layer.attention(t, weights=a, causal=True)
    mask = torch.ones(10, 10, dtype=torch.bool).tril()
    torch.testing.assert_close(result.weights, torch.softmax(want.masked_fill(~mask, -math.inf), -1),
                               rtol=1e-5, atol=1e-6)


def test_a_qk_norm_logit_is_bounded_by_its_gains_and_the_scale():
    # |norm(q)·norm(k)|/√d_k ≤ √d_k · max|1 + w_q| · max|1 + w_k| (C5/E6's bound): at w = 0, ≤ √d_k
    from attnref.training.text import TextModel
    model = TextModel(Spec(d=32, h=4, layers=1, d_ff=64, scores="qk_norm"), vocab=20, context=10, seed=1)
    layer = model.layers[0]
    x = 50 * torch.randn(3, 10, 32)
    a = layer.weights().attention
    q = torch.einsum("bnd,hde->bhne", x, a.w_q)
    k = torch.einsum("bnd,hde->bhne", x, a.w_k)
    with torch.no_grad():
        largest = layer.logits(x, a, q, k).abs().max().item()
    assert largest <= math.sqrt(8) * (1 + 1e-6)
    assert largest > 0.5 * math.sqrt(8)             # and the bound is approached by aligned q, k


# --- the stored comparisons ----------------------------------------------------------------------

def test_the_text_comparisons_are_the_amendments_settings_and_seeds():
    from attnref.training import text
    pilot, data = text_results.load()
    amendment = text_results.amendment()
    settings = text.text_settings(amendment)
    assert set(data["runs"]) == set(settings), "run `make experiments-text`"
    seeds = {str(s) for s in amendment["design"]["comparison_seeds"]}
    for name, runs in data["runs"].items():
        assert set(runs) == seeds, name
        for seed, record in runs.items():
            want = json.loads(json.dumps(settings[name].config()))
            want["seed"] = int(seed)
            assert record["config"] == want, f"{name} seed {seed}: the configuration changed: run `make experiments-text`"
    # the pilot fixed delta by the amendment's rule, from its own paired differences
    assert pilot["delta"] == max(0.01, math.ceil(results.detectable_effect(pilot["sd"], 10) / 0.005 - 1e-9) * 0.005)
    assert set(map(int, pilot["runs"]["dot"])).isdisjoint(amendment["design"]["comparison_seeds"])


def test_the_first_text_steps_reproduce_the_stored_losses():
    # two settings' first 3 steps again, against float64 (the drift rule of the synthetic runs)
    from dataclasses import replace

    from attnref.book import provenance
    from attnref.training import text
    torch.set_num_threads(1)
    _, data = text_results.load()
    plan = ex.load_plan(text_results.directory() / "plan.toml")
    corpus = text.Corpus.load(plan["corpus"]["validation_plays"])
    settings = text.text_settings(text_results.amendment())
    for name in ("qk_norm", "post, depth 4"):
        run = replace(settings[name], seed=0)
        again = text.train(run, corpus, steps=3)["first_losses"]
        model_class = text.TextModel
        try:
            text.TextModel = lambda *a, **k: model_class(*a, **k).to(torch.float64)
            exact = text.train(run, corpus, steps=3)["first_losses"]
        finally:
            text.TextModel = model_class
        distance, allowed = provenance.float32_drift(data["runs"][name]["0"]["first_losses"][:3], again, exact)
        assert distance <= allowed, f"{name}: stored first losses drifted ({distance:.2g} > {allowed:.2g}): run `make experiments-text`"


def test_text_results_made_under_another_amendment_are_refused(tmp_path):
    source = text_results.directory()
    target = tmp_path / "text"
    shutil.copytree(source, target)
    path = target / "amendment-1.toml"
    path.write_text(path.read_text().replace("steps = 500 ", "steps = 400 "))
    with pytest.raises(results.StaleData, match="another text amendment"):
        text_results.load(tmp_path)


def test_the_text_grid_is_its_amendments_settings_learning_rates_and_seeds():
    # amendment 2: every setting it names at amendment 1's learning rate times each factor, on the
    # comparison seeds, otherwise as amendment 1 trained it (a neighbour at another budget or seed
    # would not be a neighbour)
    from dataclasses import replace

    from attnref.training import text
    grid = text_results.load_grid()
    assert grid is not None, "data/experiments/text/grid.json is missing: run `make experiments-text`"
    plan = text_results.grid_amendment()
    amendment = text_results.amendment()
    settings = text.text_settings(amendment)
    want = {text_results.grid_name(s, f): replace(settings[s], lr=settings[s].lr * f)
            for s in plan["settings"] for f in plan["lr_factors"]}
    assert set(grid["runs"]) == set(want)
    seeds = {str(s) for s in amendment["design"]["comparison_seeds"]}
    for name, runs in grid["runs"].items():
        assert set(runs) == seeds, name
        for seed, record in runs.items():
            config = json.loads(json.dumps(replace(want[name], seed=int(seed)).config()))
            assert record["config"] == config, f"{name} seed {seed}: the configuration changed: run `make experiments-text`"


def test_a_text_grid_made_under_another_grid_amendment_is_refused(tmp_path):
    target = tmp_path / "text"
    shutil.copytree(text_results.directory(), target)
    if not (target / "grid.json").exists():
        pytest.fail("data/experiments/text/grid.json is missing: run `make experiments-text`")
    path = target / "amendment-2.toml"
    path.write_text(path.read_text().replace("lr_factors = [0.3333333333333333, 3.0]", "lr_factors = [0.5, 2.0]"))
    with pytest.raises(results.StaleData, match="another grid amendment"):
        text_results.load_grid(tmp_path)


def test_a_loss_difference_is_baseline_minus_treatment_paired_by_seed():
    _, data = text_results.load()
    base, treat = text_results.losses(data, "dot"), text_results.losses(data, "relu_qkv")
    assert text_results.differences(data, "dot", "relu_qkv") == [b - t for b, t in zip(base, treat)]
    broken = json.loads(json.dumps(data))
    del broken["runs"]["relu_qkv"]["3"]
    with pytest.raises(ValueError, match="same seeds"):
        text_results.differences(broken, "dot", "relu_qkv")
    broken["runs"]["dot"]["0"]["diverged"] = True
    assert math.isnan(text_results.losses(broken, "dot")[0])


# --- the text verdicts -------------------------------------------------------------------------------

def _text_cells() -> tuple[str, list[str]]:
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    setup, sections, text_cells = [], [], []
    seen_claim = False
    for cell in cells:
        if cell["cell_type"] != "code":
            if "(claim-" in "".join(cell["source"]):
                seen_claim = True
            continue
        source = "".join(cell["source"])
        tags = cell.get("metadata", {}).get("tags", [])
        if source.startswith("# on text"):
            if "remove-cell" not in tags:
                text_cells.append(source)
        elif not seen_claim:
            setup.append(source)
        elif "remove-cell" not in tags and "plotting.show" not in source and not source.startswith("# the chapter's summary"):
            sections.append(source)
    assert text_cells, "the notebook has no '# on text' cells"
    return "\n\n".join(setup + sections), text_cells


def run_text(replace: tuple[str, str] | None = None) -> dict[str, str]:
    setup, text_cells = _text_cells()
    setup = setup.replace("from myst_nb import glue", "glue = lambda *a, **k: None")
    setup = setup.replace("from IPython.display import Markdown, display", "Markdown = display = lambda *a, **k: None")
    source = "\n\n".join(text_cells)
    if replace is not None:
        original, mutant = replace
        assert source.count(original) == 1, f"the text to mutate is in the text cells {source.count(original)} times: {original!r}"
        source = source.replace(original, mutant)
    ns: dict = {"print": lambda *a, **k: None}
    default = torch.get_default_dtype()
    try:
        exec(compile(setup, "<chapter 8>", "exec"), ns)
        exec(compile(source, "<chapter 8 on text>", "exec"), ns)
    finally:
        torch.set_default_dtype(default)
    return {e: claims.decide(ns[f"t{e[1]}"].checks) for e in TEXT_IDS}, {e: ns[f"t{e[1]}"] for e in TEXT_IDS}


@pytest.fixture(scope="module")
def stored():
    return run_text()


@pytest.mark.parametrize("claim_id", TEXT_IDS)
def test_the_text_recheck_gives_the_expected_verdict(stored, claim_id):
    verdicts, _ = stored
    assert verdicts[claim_id] == claims.expected_verdict(claim_id, MODEL)


@pytest.mark.parametrize("claim_id", TEXT_IDS)
def test_every_voting_text_check_reads_a_comparison_the_amendment_names(stored, claim_id):
    # the names of the settings each voting check reads are those the amendment gives the claim
    _, evidence = stored
    plan = text_results.amendment()[claim_id]
    named = set()
    for key in ("baseline", "treatment", "conditions"):
        value = plan.get(key, [])
        for v in (value if isinstance(value, list) else [value]):
            named.update(v if isinstance(v, list) else [v])
    voting = [c for c in evidence[claim_id].checks if c.bears_on in (claims.STATED, claims.COUNTEREXAMPLE, claims.CONDITION)]
    assert voting, claim_id
    for check in voting:
        inside = check.name[check.name.rindex("[") + 1:check.name.rindex("]")] if "[" in check.name else check.name
        read = {s.strip() for part in inside.replace(" vs ", "|").split("|") for s in [part] if s.strip()}
        assert read <= named | {"", "dot, lr 3e-3", "qk_norm, lr 3e-3"}, (claim_id, check.name, read - named)


MUTATIONS = {
    # E1: the reading "at half the budget" taken at the budget (the checkpoint key ignored): the
    # robustness check then compares a reading with itself
    "E1": ("at_b, at_half = t_gain(baseline, treatment), t_gain(baseline, treatment, T_HALF)",
           "at_b, at_half = t_gain(baseline, treatment), t_gain(baseline, treatment)"),
    # E4: cosine at scale 1's learning-rate grid read against +δ instead of −δ (the "worse" reading
    # then holds at every neighbour, and the decision would stand)
    "E4": ('E4T["baseline"], E4T["treatment"], t4_gain, -T_DELTA)}',
           'E4T["baseline"], E4T["treatment"], t4_gain, T_DELTA)}'),
    # E5: the grid's treatment looked up under the baseline's name (a copy-paste slip): every
    # neighbour's difference is 0, "no gain" everywhere, and the decision would stand
    "E5": ("t_grid, text_results.grid_name(baseline, f), text_results.grid_name(treatment, f)), LEVEL)",
           "t_grid, text_results.grid_name(baseline, f), text_results.grid_name(baseline, f)), LEVEL)"),
    # E6: the largest logit of the QK-norm model read for both (no growth can be seen)
    "E6": ('dot = text_results.attention(t_data, E6T["treatment"], "max_logit", step)',
           'dot = text_results.attention(t_data, E6T["baseline"], "max_logit", step)'),
    # E7: the difference taken the wrong way round (1 head − 4 heads)
    "E7": ('t7_gain, t7_half = t_decide(t7, E7T["baseline"], E7T["treatment"], T_DELTA,',
           't7_gain, t7_half = t_decide(t7, E7T["treatment"], E7T["baseline"], T_DELTA,'),
}


@pytest.mark.parametrize("claim_id", sorted(MUTATIONS))
def test_a_plausible_bug_moves_a_text_verdict(stored, claim_id):
    verdicts, _ = run_text(MUTATIONS[claim_id])
    base, _ = stored
    moved = [e for e in TEXT_IDS if verdicts[e] != base[e]]
    assert claim_id in moved, (claim_id, verdicts[claim_id], base[claim_id])


# amendment 2's grid check passing when one learning-rate neighbour agrees (any instead of all):
# E4 and E5 would keep the decisions their neighbours do not support
GRID_MUTATION = ("        all(r == now for r, _ in readings.values()), kind=claims.TRAINING,",
                 "        any(r == now for r, _ in readings.values()), kind=claims.TRAINING,")


@pytest.mark.parametrize("claim_id", ["E4", "E5"])
def test_a_lenient_learning_rate_grid_moves_a_text_verdict(stored, claim_id):
    verdicts, _ = run_text(GRID_MUTATION)
    base, _ = stored
    assert verdicts[claim_id] != base[claim_id], (claim_id, verdicts[claim_id])


def test_a_learning_rate_grid_not_run_fails_the_decisions_it_guards(stored):
    # without text/grid.json the page must say so, and no decision may stand without its grid
    verdicts, evidence = run_text(("t_grid = text_results.load_grid()", "t_grid = None"))
    for claim_id in ("E4", "E5"):
        missing = [c for c in evidence[claim_id].checks if "learning-rate neighbours were run" in c.name]
        assert missing and not any(c.passed for c in missing), claim_id
        assert verdicts[claim_id] == claims.NOT_ESTABLISHED, claim_id


# E2 on text is not established for two independent reasons (post-LN does not learn the text at
# depth 8; the gain at depth 4 is undecided), so no single bug can move its verdict. Each reason is
# guarded by its own check instead: a bug aimed at one must flip that check.
E2_MUTATIONS = {
    # the "learns" check read on a ReLU placement instead of post-LN: it would pass at depth 8
    # and hide that the baseline never learned
    "learns check on the wrong setting": (
        ("    t_learns(t2, base)\n", "    t_learns(t2, pair[1])\n"),
        lambda name: "learns the text" in name and "depth 8" in name),
    # the gain taken the wrong way round (post-LN − ReLU): depth 8's large gain turns into a loss
    "gain the wrong way round": (
        ("    gains = {v: t_gain(base, v) for v in pair}", "    gains = {v: t_gain(v, base) for v in pair}"),
        lambda name: name.startswith("the larger ReLU gain over post, depth 8") and name.endswith(("t lower end", "t upper end"))),
}


@pytest.mark.parametrize("bug", sorted(E2_MUTATIONS))
def test_a_plausible_bug_flips_the_e2_text_check_that_guards_it(stored, bug):
    replace, targeted = E2_MUTATIONS[bug]
    _, evidence = run_text(replace)
    _, base = stored
    before = [(c.bears_on, c.passed) for c in base["E2"].checks if targeted(c.name)]
    after = [(c.bears_on, c.passed) for c in evidence["E2"].checks if targeted(c.name)]
    assert before, f"no E2 text check matches the mutation's target ({bug})"
    assert after != before, (bug, before, after)


def test_a_nan_loss_cannot_pass_a_text_check():
    # every run read as diverged (its losses and logits NaN): no text verdict survives
    verdicts, _ = run_text(("t_pilot, t_data = text_results.load()\n",
                            "t_pilot, t_data = text_results.load()\n"
                            "[r.__setitem__('diverged', True) for s in t_data['runs'].values() for r in s.values()]\n"))
    assert all(v == claims.NOT_ESTABLISHED for v in verdicts.values()), verdicts
