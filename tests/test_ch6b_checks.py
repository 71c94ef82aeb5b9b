"""Chapter 6b's checks can fail: for every recheck on SmolLM2 (H2, H8, H7, C9, C3, C6, D1, D2,
A1, A2, A3, L4), a plausible bug — in the notebook's own code, in an attnref function it calls, or in the
stored measurements it reads (a measurement bug, or a NaN) — moves the recheck's verdict away
from the expected one, and the check that catches it is named.

Each test runs the notebook's set-up cells (every code cell before the first recheck) and the code
cells of one section of ``notebooks/06b-trained-decoder.ipynb`` in this process — plotting cells and
the verdict cell are skipped, ``glue`` is a no-op — with one mutation applied, and decides the
verdict from the recorded evidence with ``claims.decide``. A source mutation replaces an exact piece
of text (the test fails, naming it, if the notebook was reworded); a data mutation changes the
arrays :func:`attnref.analysis.decoder_measure.load` returns (a copy: nothing is written). No model
file is needed except for the H8 test, which re-measures two blocks' weights with a broken rotation.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from attnref.analysis import decoder_measure, trained
from attnref.book import claims

import notebook_sections                     # tests/notebook_sections.py

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "06b-trained-decoder.ipynb"
MODEL = "SmolLM2-135M-Instruct"
IDS = ["H2", "H8", "H7", "C9", "C3", "C6", "D1", "D2", "A1", "A2", "A3", "L4"]
ANCHOR = re.compile(r"^\(smollm-(\w+)\)=$", re.M)
DEPENDS = {"L4": ["A2"]}            # L4's recheck reads the pair statistics A2's section computes


def sections() -> tuple[list[str], dict[str, list[str]]]:
    """The set-up code (cells before the first recheck) and each recheck's checking cells."""
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    setup, current, found = [], None, {}
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            match = ANCHOR.search(source)
            if match:
                current = match.group(1).upper()
                found[current] = []
            continue
        tags = cell.get("metadata", {}).get("tags", [])
        if "plotting.show" in source or "remove-cell" in tags:
            continue
        (setup if current is None else found[current]).append(source)
    assert sorted(found) == sorted(IDS), sorted(found)
    return setup, found


_STORED = decoder_measure.load(ROOT)


def run(claim_id: str, replace: tuple[str, str] | None = None, patch_data=None):
    """Run the set-up and section ``claim_id`` (with one mutation); return its verdict and checks."""
    setup, found = sections()
    sources = [source for earlier in DEPENDS.get(claim_id, []) for source in found[earlier]] + found[claim_id]
    if replace is not None:
        original, mutant = replace
        hits = sum(s.count(original) for s in setup + sources)
        assert hits == 1, f"mutation site {original!r} found {hits} times: update the test to the notebook"
        setup = [s.replace(original, mutant) for s in setup]
        sources = [s.replace(original, mutant) for s in sources]
    arrays = {k: v.clone() for k, v in _STORED[0].items()}
    if patch_data is not None:
        patch_data(arrays)
    ns: dict = {}
    default = torch.get_default_dtype()
    original_load = decoder_measure.load
    decoder_measure.load = lambda *a, **k: (arrays, _STORED[1])
    try:
        for i, source in enumerate(setup):
            exec(compile(source.replace("from myst_nb import glue", "glue = lambda *a, **k: None"),
                         f"<setup {i}>", "exec"), ns)
        for source in sources:
            exec(compile(source, f"<{claim_id}>", "exec"), ns)
    finally:
        decoder_measure.load = original_load
        torch.set_default_dtype(default)
    evidence = ns[claim_id.lower()]
    assert isinstance(evidence, claims.Evidence) and evidence.model == MODEL
    return claims.decide(evidence.checks), evidence.checks


def assert_caught(claim_id: str, verdict: str, checks, expected_failure: str) -> None:
    notebook_sections.assert_caught(claim_id, verdict, checks, expected_failure, MODEL)


@pytest.mark.parametrize("claim_id", IDS)
def test_unmutated_sections_give_the_expected_verdicts(claim_id):
    verdict, checks = run(claim_id)
    assert verdict == claims.expected_verdict(claim_id, MODEL), [c.name for c in checks if not c.passed]


# --- NaN: a non-finite measurement never passes ---------------------------------------------------

NAN_SITES = {                 # (array, index) into the stored measurements, one per recheck
    "H2": ("family_sigma", (4, 2, 0, 63)),
    "H8": ("family_change", (7, 1, 1)),
    "H7": ("long_text_sigma", (3, 5, 70)),
    "C9": ("hull_distance", (5, 1, 40)),
    "C3": ("within_post", (5, 10, 3)),
    "C6": ("ln_norm_sq", (9, 12)),
    "D1": ("pure_spread_sq", (2, 30)),
    "D2": ("grad_ffn_sq", (0, 4)),
    "A1": ("sink_mass", (3, 20, 4)),
    "A2": ("pair_cos_sq", (1, 2, 17)),
    "A3": ("semantic_raw", (3, 3, 10)),
    "L4": ("pair_cos_sq", (5, 9, 0)),
}


#: Where attnref itself refuses the NaN (its helpers raise "attnref does not propagate NaN"): the
#: notebook stops, which ``make execute`` reports; everywhere else a check must fail.
RAISES = {"H2"}          # trained.stable_rank of the spectra, in the set-up


@pytest.mark.parametrize("claim_id", IDS)
def test_a_nan_in_the_measurements_moves_the_verdict(claim_id):
    name, index = NAN_SITES[claim_id]

    def inject(arrays):
        arrays[name][index] = math.nan

    if claim_id in RAISES:
        with pytest.raises(ValueError, match="NaN"):
            run(claim_id, patch_data=inject)
        return
    verdict, checks = run(claim_id, patch_data=inject)
    assert verdict != claims.expected_verdict(claim_id, MODEL), f"{claim_id}: NaN in {name} kept the verdict"


# --- plausible bugs ---------------------------------------------------------------------------------

def test_h2_a_key_head_that_lost_a_column_is_caught():
    # Bug: the head split drops a column of key head 2 in block 7 (W_K^g of rank 63): its three
    # query heads' W has rank 63.
    def drop(arrays):
        arrays["family_sigma"][6, 3:6, :, -1] = 0.0
    assert_caught("H2", *run("H2", patch_data=drop), "smallest σ₆₄/σ₁ of the 270 heads")


def test_h8_a_rotation_that_is_not_applied_is_caught(monkeypatch):
    # Bug: R_t built as the identity (positions ignored); blocks 1–2 re-measured with it.
    from attnref import rope
    from attnref.models import smollm
    try:
        model = smollm.load(layers=2, with_embedding=False)
    except FileNotFoundError as error:
        pytest.skip(str(error))
    monkeypatch.setattr(rope, "rotation_matrix",
                        lambda t, d_k, base, dtype=torch.float64: torch.eye(d_k, dtype=dtype))
    broken = decoder_measure.family_spectra(model)

    def measured_with_the_bug(arrays):
        arrays["family_change"][:2] = broken["family_change"]
        arrays["family_sigma"][:2] = broken["family_sigma"]
    assert_caught("H8", *run("H8", patch_data=measured_with_the_bug), "‖W(1) − W(0)‖_F")


def test_h7_singular_value_index_off_by_one_is_caught():
    # Bug: σ_{d_k} taken for σ_{d_k + 1} (0-based index confusion).
    assert_caught("H7", *run("H7", ("long_sigma[..., d_k:]", "long_sigma[..., d_k - 1:]")),
                  "logit matrices")


def test_c9_a_hull_test_that_calls_vertices_interior_is_caught():
    # Bug: the hull test reports distance 0 for every key of block 5 (e.g. the key compared with
    # itself): keys that the text's queries do select are counted unselectable.
    def inside(arrays):
        arrays["hull_distance"][4] = 0.0
    assert_caught("C9", *run("C9", patch_data=inside), "given the largest score by a query")


def test_c9_with_no_interior_key_the_premise_fails_and_nothing_votes_on_the_empty_set():
    # C9's one definition (hull.record_c9): 0 keys inside their head's hull -> premise fails here, the
    # count recorded; no check counts winners among no keys (round 5: 0 = 0 could not fail)
    verdict, checks = run("C9")
    assert verdict == claims.PREMISE_FAILS
    assert [(c.value, c.passed) for c in checks if c.bears_on == claims.PREMISE] == [(0, True)]
    assert not [c for c in checks if c.bears_on == claims.STATED]


def test_c9_a_mean_key_given_the_top_score_is_caught():
    # Bug: scores that are not q̃·k̃ (e.g. the rotation applied to one side only) let a point inside
    # the hull win a query: the mean key's best margin turns positive, the non-vacuous check fails.
    def winning(arrays):
        arrays["hull_centroid_gap"][3, 5] = 0.4
    assert_caught("C9", *run("C9", patch_data=winning), "mean key (inside the hull)")


def test_c9_a_hull_test_that_misses_interior_keys_is_caught():
    # Bug: the hull test never finds a point inside (the count would be 0 whatever the keys): the
    # control, each head's mean key, is reported away from the hull.
    def outside(arrays):
        arrays["hull_centroid_distance"] = 0.3 * arrays["hull_key_scale"]
    assert_caught("C9", *run("C9", patch_data=outside), "mean key to the hull")


def test_c9_a_vertex_within_round_off_of_the_hull_is_caught():
    # A key 10⁻⁸ × the key scale from the others' hull: counted neither way, the check says so.
    def near(arrays):
        arrays["hull_distance"][7, 2, 11] = 1e-8 * arrays["hull_key_scale"][7, 2]
    assert_caught("C9", *run("C9", patch_data=near), "between 10⁻⁹ and 10⁻⁶")


def test_c3_variance_of_the_scaled_logits_is_caught():
    # Bug: the variance taken of q̃·k̃/√d_k (the softmax's input) instead of q̃·k̃.
    assert_caught("C3", *run("C3", ("denominator = rows.sum((1, 2)) * d_k",
                                    "denominator = rows.sum((1, 2)) * d_k * d_k")),
                  "within-row Var[q̃·k̃]/d_k, rows and heads pooled")


def test_c3_components_that_meet_the_premise_are_seen():
    # Alternative: queries and keys with unit-variance components (E‖q‖² = E‖k‖² = d_k per token).
    def unit_variance(arrays):
        n = arrays["sentence_lengths"].double()[:, None, None]
        arrays["q_norm_sq"] = 64 * n.expand_as(arrays["q_norm_sq"]).clone()
        arrays["k_norm_sq"] = 64 * n.expand_as(arrays["k_norm_sq"]).clone()
    assert_caught("C3", *run("C3", patch_data=unit_variance), "E[q_i²]·E[k_i²]")


def test_c6_norms_measured_before_the_gain_are_caught():
    # Bug: ‖RMSNorm(h)‖ stored without the gain (every norm √d).
    def without_gain(arrays):
        n = arrays["sentence_lengths"].double()[:, None]
        arrays["ln_norm"] = math.sqrt(576) * n.expand_as(arrays["ln_norm"]).clone()
        arrays["ln_norm_sq"] = 576 * n.expand_as(arrays["ln_norm_sq"]).clone()
    assert_caught("C6", *run("C6", patch_data=without_gain), "CV of ‖RMSNorm(h)‖, trained gain")


def test_c6_rms_norm_without_the_root_is_caught():
    # Bug: RMSNorm divides by the mean square, not its root: the gain-free norm is not √d.
    def mean_square(arrays):
        arrays["ln_dev"] = arrays["ln_dev"] + 0.5
    assert_caught("C6", *run("C6", patch_data=mean_square), "without the gain")


def test_d1_attention_only_path_reading_the_stream_is_caught():
    # Bug: the attention-only path's sums are the residual stream's (the skips were kept).
    assert_caught("D1", *run("D1", ('("attention only", "pure_spread_sq", "pure_total_sq")',
                                    '("attention only", "spread_sq", "total_sq")')),
                  "attention-only path")


def test_d1_residual_without_removing_the_mean_is_caught():
    # Bug: the "residual" of the attention-only path is its whole norm (mean not removed).
    assert_caught("D1", *run("D1", ('("attention only", "pure_spread_sq", "pure_total_sq")',
                                    '("attention only", "pure_total_sq", "pure_total_sq")')),
                  "attention-only path")


def test_d1_an_accelerating_collapse_is_caught():
    # Alternative: the collapse of full (unmasked) attention, whose rate grows layer by layer.
    def accelerating(arrays):
        steps = torch.arange(31, dtype=torch.float64)
        arrays["pure_spread_sq"] = arrays["pure_total_sq"] * torch.exp(-0.05 * 1.3 ** steps)
    assert_caught("D1", *run("D1", patch_data=accelerating), "mean rate of layers")


def test_d2_blocks_in_reverse_order_are_caught():
    # Bug: the per-block gradients read in reverse order (the output block taken for block 1).
    assert_caught("D2", *run("D2", ("first_ten, last_ten = grad[:, :10].mean(1), grad[:, -10:].mean(1)",
                                    "first_ten, last_ten = grad[:, -10:].mean(1), grad[:, :10].mean(1)")),
                  "sign test")


def test_a1_weights_read_by_column_are_caught():
    # Bug: the measurement reads row 0 (w[:, 0, 1:], all masked) instead of column 0: no mass.
    def transposed(arrays):
        arrays["sink_mass"].zero_()
    assert_caught("A1", *run("A1", patch_data=transposed), "blocks whose mean share")


def test_a1_value_norm_summed_not_averaged_is_caught():
    # Bug: ‖v₀‖ summed over the sentences instead of averaged.
    assert_caught("A1", *run("A1", ('(data["value_first_norm"].sum(0) / sentences)',
                                    '(data["value_first_norm"].sum(0))')), "‖v₀‖")


def test_a2_pair_sums_with_sentences_shifted_are_caught():
    # Bug: pair_sums labels every token with the next sentence's index.
    def shifted(arrays):
        arrays["pair_cos"] = arrays["pair_cos"].roll(1, 0)
    assert_caught("A2", *run("A2", patch_data=shifted), "within a sentence")


def test_a2_isotropic_vectors_fail_the_claim():
    # Alternative: isotropic representations (mean cosine 0, E[cos²] = 1/d between sentences).
    def isotropic(arrays):
        n = arrays["sentence_lengths"].double()
        off = ~torch.eye(n.numel(), dtype=torch.bool)
        arrays["pair_cos"][off] = 0.0
        arrays["pair_cos_sq"][off] = (n[:, None] * n[None, :])[off][:, None] / 576
    assert_caught("A2", *run("A2", patch_data=isotropic), "mean cosine")


def test_l4_isotropic_embeddings_are_seen():
    # Alternative: the embeddings isotropic between sentences (E[cos²] = 1/d), the blocks not.
    def isotropic_embeddings(arrays):
        n = arrays["sentence_lengths"].double()
        off = ~torch.eye(n.numel(), dtype=torch.bool)
        arrays["pair_cos_sq"][..., 0][off] = (n[:, None] * n[None, :])[off] / 576
    assert_caught("L4", *run("L4", patch_data=isotropic_embeddings), "d·E[cos²]")


def test_the_bootstrap_interval_is_used_on_the_log_scale(monkeypatch):
    # Bug: a normal-theory interval on the raw scale (the old D1 interval went below 0).
    verdict, checks = run("D1")
    text = next(c.measured for c in checks if "attention-only path" in c.name)
    low = text.split("[")[1].split(",")[0]
    assert not low.startswith("−"), f"D1's interval of a positive residual goes negative: {text}"
    assert trained.BOOTSTRAP in claims.NOMINAL_BOUNDS


def test_c6_coefficient_of_variation_with_the_variance_sign_flipped_is_caught(monkeypatch):
    # Bug in attnref: CV from (mean² − mean of squares), clamped at 0 — every CV becomes 0.
    def flipped(total, total_squares, count):
        mean = total / count
        return (mean * mean - total_squares / count).clamp_min(0).sqrt() / mean
    monkeypatch.setattr(trained, "coefficient_of_variation", flipped)
    assert_caught("C6", *run("C6"), "CV of ‖RMSNorm(h)‖, trained gain")



def test_d1_the_control_without_the_mask_must_accelerate():
    # Bug: the control reads the causal path (no mask removed): its rate does not grow, and the
    # explanation "the mask keeps the rate constant" loses its support.
    assert_caught("D1", *run("D1", ('(data["free_spread_sq"].sum(0) / data["free_total_sq"].sum(0))',
                                    '(data["pure_spread_sq"].sum(0) / data["pure_total_sq"].sum(0))')),
                  "without the causal mask")


def test_d2_records_the_size_of_its_test_not_the_p_value():
    # The test "p ≤ 0.05" with 16 sentences rejects from the smallest c with P(B ≥ c) ≤ 0.05 on;
    # its size P(B ≥ c), from scipy's binomial here, is the failure probability it records.
    from scipy.stats import binom
    verdict, checks = run("D2")
    sign = next(c for c in checks if "sign test" in c.name)
    n = 16
    c = min(k for k in range(n + 1) if binom.sf(k - 1, n, 0.5) <= 0.05)
    assert c == 12 and sign.failure_probability == pytest.approx(binom.sf(c - 1, n, 0.5), rel=1e-12)   # 0.0384
    assert sign.excludes and sign.false_failure is not None and sign.held_to.startswith(f"≥ {c} of {n}")


def test_a3_paraphrases_compared_with_unrelated_sentences_are_caught():
    # Bug: the pair cosines stored with the second sentences shifted by one pair (a paraphrase
    # compared with an unrelated sentence): no gap, or a negative one.
    def shifted(arrays):
        for name in ("semantic_raw", "semantic_removed"):
            arrays[name] = arrays[name].roll(1, 1)
    verdict, _ = run("A3", patch_data=shifted)
    assert verdict != claims.expected_verdict("A3", MODEL)


def test_a3_a_baseline_that_removes_nothing_is_caught():
    # Bug: the "removed" cosines are the raw ones (the common direction kept).
    def kept(arrays):
        arrays["semantic_removed"] = arrays["semantic_raw"].clone()
    assert_caught("A3", *run("A3", patch_data=kept), "with the common direction removed / raw")
