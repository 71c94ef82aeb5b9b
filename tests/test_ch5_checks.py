"""Chapter 5's checks can fail: for every claim H1–H8, one plausible bug injected into the
notebook's own code (or into the attnref function it calls) moves the claim's verdict away from
the expected one, and the check that catches it is named.

Each test runs the set-up cell and the code cells of one claim section of
``notebooks/05-multi-head.ipynb`` in this process (plotting cells and the verdict cell are
skipped; ``glue`` is a no-op), with one mutation applied, and decides the verdict from the
recorded evidence with ``claims.decide``. A mutation is a replacement of an exact piece of
source text (the test fails, naming the text, if the notebook was reworded) or a monkeypatched
attnref function.
"""

from __future__ import annotations

import types

import pytest
import torch

from attnref import counts, rope
from attnref.analysis import lowrank

import notebook_sections                     # tests/notebook_sections.py
from notebook_sections import assert_caught

NOTEBOOK = "05-multi-head.ipynb"
CLAIM_IDS = [f"H{i}" for i in range(1, 9)]


def run_section(claim_id: str, replace: tuple[str, str] | None = None, namespace: dict | None = None):
    """Run one claim section (optionally with one source mutation); return its verdict and checks."""
    return notebook_sections.run_section(NOTEBOOK, CLAIM_IDS, claim_id, replace, namespace)


@pytest.fixture(autouse=True)
def quiet(monkeypatch, capsys):
    monkeypatch.setenv("ATTNREF_FIGURES", "off")
    yield


def test_h1_catches_a_transposed_fused_matrix():
    # Row- vs column-vector slip: W_i = W^K W^Qᵀ (the transpose) instead of W^Q W^Kᵀ.
    verdict, checks = run_section("H1", ("W_i = h1_weights.fused_bilinear(i)",
                                         "W_i = h1_weights.fused_bilinear(i).T"))
    assert_caught("H1", verdict, checks, "vs torch's per-head weights")


def test_h2_catches_heads_mixed_by_a_wrong_reshape():
    # A packed projection reshaped in the wrong order mixes two heads into one fused matrix.
    verdict, checks = run_section("H2", (
        "fused = torch.stack([h2_weights.fused_bilinear(i) for i in range(h)])",
        "fused = torch.stack([h2_weights.fused_bilinear(i) + h2_weights.fused_bilinear((i + 1) % h)"
        " for i in range(h)])"))
    assert_caught("H2", verdict, checks, "numerical rank of each")


def test_h3_catches_a_count_without_biases():
    verdict, checks = run_section("H3", ("counts.attention_parameter_count(d, h), kind",
                                         "counts.attention_parameter_count(d, h, bias=False), kind"))
    assert_caught("H3", verdict, checks, "torch.nn.MultiheadAttention(512, 8) parameters")


def test_h4_catches_a_count_that_forgets_the_product_with_the_keys():
    real = counts.score_multiply_adds

    def forgetful(n, d, d_k, m=None, fused=False, project_keys=True):
        if fused:                          # (X_q W_i) X_kᵀ forgotten: only n·d² charged
            return counts.matmul_multiply_adds((n, d), (d, d))
        return real(n, d, d_k, m=m, project_keys=project_keys)

    mutant = types.SimpleNamespace(**{k: getattr(counts, k) for k in dir(counts) if not k.startswith("__")})
    mutant.score_multiply_adds = forgetful
    verdict, checks = run_section("H4", namespace={"counts": mutant})
    assert_caught("H4", verdict, checks, "(i) m = n")


def test_h5_catches_an_inverted_padding_mask():
    # torch's key_padding_mask means "ignore"; attnref's key_mask means "keep".
    verdict, checks = run_section("H5", ("key_padding_mask=~key_mask", "key_padding_mask=key_mask"))
    assert_caught("H5", verdict, checks, "vs torch.nn.MultiheadAttention")


def test_h6_catches_a_gauge_with_the_inverse_instead_of_the_inverse_transpose():
    verdict, checks = run_section("H6", ("(W_K * A.adjugate().T).T", "(W_K * A.adjugate()).T"))
    assert_caught("H6", verdict, checks, "(W^Q A)(W^K A⁻ᵀ)ᵀ")


def test_h7_catches_centring_the_wrong_axis(monkeypatch):
    def centre_columns(logits):
        return logits - logits.mean(dim=-2, keepdim=True)    # columns, not rows: shifts survive

    monkeypatch.setattr(lowrank, "centre_rows", centre_columns)
    verdict, checks = run_section("H7")
    assert_caught("H7", verdict, checks, "centred log-weights")


def test_h8_catches_a_rotation_in_the_wrong_direction(monkeypatch):
    def rotate_half_backwards(x):
        half = x.shape[-1] // 2
        return torch.cat((x[..., half:], -x[..., :half]), dim=-1)   # rotates by −tθ

    monkeypatch.setattr(rope, "rotate_half", rotate_half_backwards)
    verdict, checks = run_section("H8")
    assert_caught("H8", verdict, checks, "apply_rotary_pos_emb, same tables")
