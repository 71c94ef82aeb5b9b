"""Chapter 5's checks catch plausible bugs in attnref: each test injects one bug into the library
(a monkeypatched attnref function, never a copy of a check or a stored output), runs the
notebook's own set-up cell and the code cells of one claim section of
``notebooks/05-multi-head.ipynb`` in this process (plotting cells and the verdict cell are
skipped; ``glue`` is a no-op), and asserts that the verdict decided from the recorded evidence
with ``claims.decide`` moves away from the expected one, naming the check that catches it.

The bugs are the ones a reader of the library would plausibly make: a fused matrix transposed,
heads split on the wrong axis, a packed projection reshaped in the wrong order, a count that
forgets a bias or a product, rotary pairs of the wrong layout, a rank without a threshold, a
centring on the wrong axis, a distance that drops one singular value too many. Non-finite
values must never pass: the last tests inject a NaN into one head (the last one, which a
Python ``max(accumulator, value)`` would silently drop) and see the verdict move.

A clean run of every section gives the expected verdict (the first test), so each mutant's
failure is the bug's doing.
"""

from __future__ import annotations

import pytest
import torch

from attnref import counts, multihead, rope
from attnref.analysis import lowrank
from attnref.book import claims

import notebook_sections                     # tests/notebook_sections.py
from notebook_sections import assert_caught

NOTEBOOK = "05-multi-head.ipynb"
CLAIM_IDS = [f"H{i}" for i in range(1, 9)]


def run_section(claim_id: str, replace: tuple[str, str] | None = None, namespace: dict | None = None):
    """Run one claim section (optionally with one source mutation); return its verdict and checks."""
    return notebook_sections.run_section(NOTEBOOK, CLAIM_IDS, claim_id, replace, namespace)


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("ATTNREF_FIGURES", "off")
    yield


@pytest.mark.parametrize("claim_id", CLAIM_IDS)
def test_every_section_gives_its_expected_verdict_without_a_bug(claim_id):
    verdict, checks = run_section(claim_id)
    assert verdict == claims.CLAIMS[claim_id].expected, [c.name for c in checks if not c.passed]
    assert all(c.fails_if for c in checks), [c.name for c in checks if not c.fails_if]


# --- bugs in attnref.multihead --------------------------------------------------------------

def test_h1_catches_a_transposed_fused_matrix(monkeypatch):
    # Row- vs column-vector slip: W_i = W^K W^Qᵀ instead of W^Q W^Kᵀ.
    monkeypatch.setattr(multihead.MultiHeadWeights, "fused_bilinear",
                        lambda self, head: self.w_k[head] @ self.w_q[head].T)
    verdict, checks = run_section("H1")
    assert_caught("H1", verdict, checks, "factored vs fused scores")


def _split_heads_on_the_wrong_axis(x_q, x_k, x_v, weights):
    # The packed product (…, n, h·d_k) cut as (d_k, h): each "head" takes every h-th column.
    h, d_k, d_v = weights.h, weights.d_k, weights.d_v
    w_q, w_k, w_v = weights.packed_projections()
    q, k, v = x_q @ w_q, x_k @ w_k, x_v @ w_v
    if weights.b_q is not None:
        q, k, v = q + weights.b_q.reshape(-1), k + weights.b_k.reshape(-1), v + weights.b_v.reshape(-1)
    q = q.unflatten(-1, (d_k, h)).transpose(-1, -2).transpose(-3, -2)
    k = k.unflatten(-1, (d_k, h)).transpose(-1, -2).transpose(-3, -2)
    v = v.unflatten(-1, (d_v, h)).transpose(-1, -2).transpose(-3, -2)
    return q, k, v


def test_h5_catches_heads_split_on_the_wrong_axis(monkeypatch):
    monkeypatch.setattr(multihead, "_split_heads", _split_heads_on_the_wrong_axis)
    verdict, checks = run_section("H5")
    assert_caught("H5", verdict, checks, "per head vs packed")


def test_h5_and_h1_catch_a_packed_projection_reshaped_in_the_wrong_order(monkeypatch):
    def packed_without_permute(self):
        # (h, d_in, w) reshaped straight to (d_in, h·w): rows of different heads interleaved.
        return tuple(w.reshape(w.shape[1], -1) for w in (self.w_q, self.w_k, self.w_v))

    monkeypatch.setattr(multihead.MultiHeadWeights, "packed_projections", packed_without_permute)
    verdict, checks = run_section("H5")
    assert_caught("H5", verdict, checks, "per head vs packed")
    verdict, checks = run_section("H1")        # to_torch packs the same way: torch's heads differ
    assert_caught("H1", verdict, checks, "vs torch's per-head weights")


def test_h1_catches_query_and_key_biases_swapped_in_the_copy_to_torch(monkeypatch):
    import dataclasses
    real = multihead.MultiHeadWeights.to_torch

    def swapped(self):
        return real(dataclasses.replace(self, b_q=self.b_k, b_k=self.b_q))

    monkeypatch.setattr(multihead.MultiHeadWeights, "to_torch", swapped)
    verdict, checks = run_section("H1")
    assert_caught("H1", verdict, checks, "vs torch's per-head weights")


# --- bugs in attnref.counts -----------------------------------------------------------------

def test_h3_catches_a_count_without_the_output_bias(monkeypatch):
    real = counts.attention_parameter_count

    def without_output_bias(d, h, d_k=None, d_v=None, bias=True):
        return real(d, h, d_k, d_v, bias) - (d if bias else 0)

    monkeypatch.setattr(counts, "attention_parameter_count", without_output_bias)
    verdict, checks = run_section("H3")
    assert_caught("H3", verdict, checks, "torch.nn.MultiheadAttention(512, 8) parameters")


def test_h3_catches_per_head_biases_counted_once(monkeypatch):
    real = counts.attention_parameter_count

    def one_bias_per_projection(d, h, d_k=None, d_v=None, bias=True):
        # h·(d_k + d_k + d_v) biases counted as d_k + d_k + d_v
        full = real(d, h, d_k, d_v, bias)
        width = d // h if d_k is None else d_k
        return full - ((h - 1) * 3 * width if bias else 0)

    monkeypatch.setattr(counts, "attention_parameter_count", one_bias_per_projection)
    verdict, checks = run_section("H3")
    assert_caught("H3", verdict, checks, "parameters (= counts.attention_parameter_count)")


def test_h4_catches_an_absorbed_order_that_forgets_a_product(monkeypatch):
    real = counts.score_multiply_adds

    def forgetful(n, d, d_k, m=None, fused=False, project_keys=True, absorbed=False):
        if absorbed:     # ((X_q W^Q) W^Kᵀ) X_kᵀ charged without the product with W^Kᵀ
            m = n if m is None else m
            return counts.matmul_multiply_adds((n, d), (d, d_k)) + counts.matmul_multiply_adds((n, d), (d, m))
        return real(n, d, d_k, m=m, fused=fused, project_keys=project_keys)

    monkeypatch.setattr(counts, "score_multiply_adds", forgetful)
    verdict, checks = run_section("H4")
    assert_caught("H4", verdict, checks, "multiply–adds of the products each order runs")


def test_h4_catches_a_fused_count_that_forgets_the_product_with_the_keys(monkeypatch):
    real = counts.score_multiply_adds

    def forgetful(n, d, d_k, m=None, fused=False, project_keys=True, absorbed=False):
        if fused:        # (X_q W_i) X_kᵀ forgotten: only n·d² charged
            return counts.matmul_multiply_adds((n, d), (d, d))
        return real(n, d, d_k, m=m, project_keys=project_keys, absorbed=absorbed)

    monkeypatch.setattr(counts, "score_multiply_adds", forgetful)
    verdict, checks = run_section("H4")
    assert_caught("H4", verdict, checks, "C_fused − C_absorbed")


def test_h4_catches_a_count_library_without_the_absorbed_order(monkeypatch):
    # The order issue 26 found missing: "absorbed" silently falls back to the factored order.
    real = counts.score_multiply_adds

    def factored_only(n, d, d_k, m=None, fused=False, project_keys=True, absorbed=False):
        return real(n, d, d_k, m=m, fused=fused, project_keys=project_keys)

    monkeypatch.setattr(counts, "score_multiply_adds", factored_only)
    verdict, checks = run_section("H4")
    assert_caught("H4", verdict, checks, "multiply–adds of the products each order runs")


# --- bugs in attnref.analysis.lowrank -------------------------------------------------------

def test_h2_catches_a_numerical_rank_without_a_threshold(monkeypatch):
    monkeypatch.setattr(lowrank, "rank_tolerance", lambda singular_values, shape: 0.0)
    verdict, checks = run_section("H2")
    assert_caught("H2", verdict, checks, "numerical rank of each")


def test_h6_and_h8_catch_a_numerical_rank_without_a_threshold(monkeypatch):
    monkeypatch.setattr(lowrank, "rank_tolerance", lambda singular_values, shape: 0.0)
    verdict, checks = run_section("H6")
    assert_caught("H6", verdict, checks, "numerical Jacobian rank")
    verdict, checks = run_section("H8")
    assert_caught("H8", verdict, checks, "dimension of span{W(t)}")


def test_h2_catches_an_exact_rank_that_counts_columns(monkeypatch):
    # "rank" read off the shape of the factor: min(rows, cols)
    monkeypatch.setattr(lowrank, "exact_rank", lambda matrix: min(matrix.shape))
    verdict, checks = run_section("H2")
    assert_caught("H2", verdict, checks, "generic rank of symbolic W_i")


def test_h5_catches_an_exact_rank_that_counts_columns(monkeypatch):
    monkeypatch.setattr(lowrank, "exact_rank", lambda matrix: min(matrix.shape))
    verdict, checks = run_section("H5")
    assert_caught("H5", verdict, checks, "exact rank of W^Q W_i^Q")


def test_h7_catches_centring_the_wrong_axis(monkeypatch):
    def centre_columns(logits):
        return logits - logits.mean(dim=-2, keepdim=True)    # columns, not rows: shifts survive

    monkeypatch.setattr(lowrank, "centre_rows", centre_columns)
    verdict, checks = run_section("H7")
    assert_caught("H7", verdict, checks, "centred log-weights")


def test_h7_catches_a_distance_that_drops_one_singular_value_too_many(monkeypatch):
    def off_by_one(logits, rank):
        singular_values = torch.linalg.svdvals(lowrank.centre_rows(logits))
        return (singular_values[rank + 1:] ** 2).sum().sqrt().item()

    monkeypatch.setattr(lowrank, "distance_to_rank_modulo_row_shifts", off_by_one)
    verdict, checks = run_section("H7")
    assert_caught("H7", verdict, checks, "distance bound of eq-h7-distance")


# --- bugs in attnref.rope -------------------------------------------------------------------

def test_h8_catches_a_rotation_in_the_wrong_direction(monkeypatch):
    def rotate_half_backwards(x):
        half = x.shape[-1] // 2
        return torch.cat((x[..., half:], -x[..., :half]), dim=-1)   # rotates by −tθ

    monkeypatch.setattr(rope, "rotate_half", rotate_half_backwards)
    verdict, checks = run_section("H8")
    assert_caught("H8", verdict, checks, "apply_rotary_pos_emb, same tables")


def test_h8_catches_pairs_of_the_interleaved_layout(monkeypatch):
    # GPT-NeoX/Llama pair p with p + d_k/2; the original RoFormer pairs 2p with 2p + 1.
    def rotate_interleaved(x):
        pairs = x.unflatten(-1, (-1, 2))                             # (..., d_k/2, 2)
        return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)

    monkeypatch.setattr(rope, "rotate_half", rotate_interleaved)
    verdict, checks = run_section("H8")
    assert_caught("H8", verdict, checks, "apply_rotary_pos_emb, same tables")


def test_h8_catches_cos_sin_tables_in_the_interleaved_layout(monkeypatch):
    def interleaved_tables(positions, d_k, base=10000.0, *, dtype=None, device=None):
        half = rope.angles(positions, d_k, base, dtype=dtype, device=device)   # (..., n, d_k/2)
        both = half.repeat_interleave(2, dim=-1)                            # θ_0 θ_0 θ_1 θ_1 …
        return both.cos(), both.sin()

    monkeypatch.setattr(rope, "cos_sin", interleaved_tables)     # rope.rotate reads its tables here
    verdict, checks = run_section("H8")
    assert_caught("H8", verdict, checks, "LlamaRotaryEmbedding + apply_rotary_pos_emb")


def test_h8_catches_frequencies_with_the_wrong_exponent(monkeypatch):
    real = rope.frequencies

    def doubled_exponent(d_k, base=10000.0, *, dtype=None, device=None):
        return real(d_k, base, dtype=dtype, device=device) ** 2          # b^(−4p/d_k)

    monkeypatch.setattr(rope, "frequencies", doubled_exponent)
    verdict, checks = run_section("H8")
    assert_caught("H8", verdict, checks, "LlamaRotaryEmbedding + apply_rotary_pos_emb")


def test_h8_catches_a_rotation_matrix_turning_the_other_way(monkeypatch):
    real = rope.rotation_matrix
    monkeypatch.setattr(rope, "rotation_matrix", lambda offset, d_k, base=10000.0, **kw: real(offset, d_k, base, **kw).T.contiguous())
    verdict, checks = run_section("H8")
    assert_caught("H8", verdict, checks, "q_i R_{j−i} k_jᵀ")


# --- non-finite values never pass -----------------------------------------------------------

# attnref refuses NaN inputs (ValueError), so a NaN is injected where a bug would create one:
# in the output of a library function. Every accumulation over heads or sizes starts from a
# finite value, where Python's max(accumulator, nan) returns the accumulator: these mutants
# passed the checks before the accumulations were taken with torch.

def test_h1_a_softmax_that_overflows_to_nan_never_passes(monkeypatch):
    import attnref
    monkeypatch.setattr(attnref, "softmax", notebook_sections.with_nan(attnref.softmax))
    verdict, checks = run_section("H1")
    assert_caught("H1", verdict, checks, "vs torch's per-head weights")
    assert "NaN" in [c.measured for c in checks if not c.passed]


def test_h1_nan_scores_of_the_last_head_never_pass(monkeypatch):
    import attnref
    calls = []

    def last_head(*args, **kwargs):
        calls.append(1)
        return len(calls) == 4                                # h = 4 heads: the last one

    monkeypatch.setattr(attnref, "luong_dot_scores",
                        notebook_sections.with_nan(attnref.luong_dot_scores, when=last_head))
    verdict, checks = run_section("H1")
    assert_caught("H1", verdict, checks, "factored vs fused scores")


def test_h5_a_nan_packed_output_never_passes(monkeypatch):
    import attnref
    monkeypatch.setattr(attnref, "multi_head_attention_packed",
                        notebook_sections.with_nan(attnref.multi_head_attention_packed, "output"))
    verdict, checks = run_section("H5")
    assert_caught("H5", verdict, checks, "per head vs packed")


def test_h7_a_nan_distance_for_the_last_width_never_passes(monkeypatch):
    real = lowrank.distance_to_rank_modulo_row_shifts

    def nan_at_the_widest(logits, rank):
        return float("nan") if rank == logits.shape[-1] else real(logits, rank)

    monkeypatch.setattr(lowrank, "distance_to_rank_modulo_row_shifts", nan_at_the_widest)
    verdict, checks = run_section("H7")
    assert_caught("H7", verdict, checks, "distance bound of eq-h7-distance")


def test_h8_a_nan_rotation_for_the_last_width_never_passes(monkeypatch):
    monkeypatch.setattr(rope, "rotate", notebook_sections.with_nan(
        rope.rotate, when=lambda x, *a, **k: x.shape[-1] == 64))
    verdict, checks = run_section("H8")
    assert_caught("H8", verdict, checks, "apply_rotary_pos_emb, same tables")


# --- issue 38: H4's figure alt text and (ii) with one cache, H1's sum of outer products ------------

def test_h4_alt_text_states_the_ratios_the_counts_give():
    # The alt text of the stacked cost figure is static metadata: its numbers must be the counts'.
    import json
    import re

    cells = json.loads((notebook_sections.NOTEBOOKS / NOTEBOOK).read_text(encoding="utf-8"))["cells"]
    (alt,) = [c["metadata"]["mystnb"]["image"]["alt"] for c in cells
              if c["metadata"].get("mystnb", {}).get("figure", {}).get("name") == "fig-h4-cost"]
    assert "Left" not in alt and "Right" not in alt and "Top:" in alt and "Bottom:" in alt
    fused = counts.score_multiply_adds(256, 256, 8, fused=True)
    ratios = {round(fused / counts.score_multiply_adds(256, 256, 8), 1),
              round(fused / counts.score_multiply_adds(256, 256, 8, absorbed=True), 2),
              round(counts.score_multiply_adds(256, 256, 256, fused=True)
                    / counts.score_multiply_adds(256, 256, 256), 3)}
    assert ratios == {21.3, 1.88, 0.667}
    stated = {float(x) for x in re.findall(r"\d+\.\d+", alt)}
    assert ratios <= stated, (ratios, stated)
    crossover = 256 * 7 / (256 + 1 - 8)                      # m* = d(h − 1)/(d + 1 − h), d = 256, h = 8
    assert round(crossover, 1) in stated
    below = [m for m in (4, 8) if counts.score_multiply_adds(1, 256, 32, m=m, fused=True)
             < counts.score_multiply_adds(1, 256, 32, m=m)]
    assert below == [8] and "between m = 4 and m = 8" in alt


def test_h4_catches_a_product_count_that_drops_the_inner_dimension(monkeypatch):
    # matmul_multiply_adds returning p·r: the counts of (ii) with one cache no longer match
    monkeypatch.setattr(counts, "matmul_multiply_adds", lambda a_shape, b_shape: a_shape[0] * b_shape[1])
    verdict, checks = run_section("H4")
    assert_caught("H4", verdict, checks, "(ii) the same cache")


def test_h1_catches_a_fused_matrix_built_from_one_column_pair():
    # W_i taken as the outer product of the first columns only (the "outer product" reading)
    verdict, checks = run_section("H1", ("W_fused = W_Q * W_K.T ", "W_fused = W_Q[:, :1] * W_K[:, :1].T "))
    assert_caught("H1", verdict, checks, "sum of d_k outer products")
