"""Chapter 3's checks can fail: for every claim M1–M7, plausible bugs injected into attnref (or
NaN injected into the chapter's inputs) move the claim's verdict away from the expected one, and
the check that catches each is named.

Each test runs the set-up cell and the code cells of one claim section of
``notebooks/03-attention-vs-linear.ipynb`` in this process (``tests/notebook_sections.py``:
plotting cells and the verdict cell are skipped, ``glue`` is a no-op), with one bug injected, and
decides the verdict from the recorded evidence with ``claims.decide`` — the notebook's own
checks, never a copy of them.

| claim | injected bug | check that catches it |
| --- | --- | --- |
| M1 | attention's weights detached from the input | ∂α/∂X parity with torch |
| M1 | one token's key mixed into another's | other keys' log-ratios along the sweep |
| M2 | sliding window off by one token | window vs its explicit loop (supporting) |
| M2 | sliding window with its offsets reversed | window vs its explicit loop (supporting) |
| M3 | a causal mask switched on at every length | attnref vs torch over n |
| M3 | NaN in torch's copy of the weights | attnref vs torch over n (NaN fails) |
| M4 | a causal mask silently on | SA(PX) = P SA(X), attnref (no causal mask) |
| M4 | a positional encoding leaking into the no-position case | SA(PX) = P SA(X), attnref |
| M4 | the causal mask ignored | the causal-mask counterexample |
| M4 | sinusoidal encodings with sine and cosine swapped, i for 2i, or in halves | encodings vs their closed form (supporting) |
| M5 | linear attention with a softmax | linear_attention(I, Φ, Φ) vs the loop (supporting) |
| M4 | NaN in torch's copy of the weights | SA(PX) = P SA(X), torch |
| M5 | a NaN out of attnref's bra-ket sum | linear_attention(I, Φ, Φ) vs the loop (supporting) |
| M6 | linear attention scaled by 1/√d_k | linear_attention vs the bra-ket loop (supporting) |
| M6 | linear attention with a softmax | linear_attention vs the bra-ket loop (supporting) |
| M7 | the hull test's sign flipped | the exact 2-D hull test |
| M7 | softmax over the queries (dim −2) | row sums of the weights; torch parity |
| M7 | Wolfe's distance always 0 | Wolfe vs negative affine weights (supporting) |
"""

from __future__ import annotations

import pytest
import torch

import attnref
import attnref.sequence_layers
from attnref.analysis import hull
from attnref.attention import AttentionResult
from attnref.book import claims

import notebook_sections                     # tests/notebook_sections.py
from notebook_sections import assert_caught

NOTEBOOK = "03-attention-vs-linear.ipynb"
CLAIM_IDS = [f"M{i}" for i in range(1, 8)]


def run_section(claim_id: str, replace: tuple[str, str] | None = None, namespace: dict | None = None):
    """Run one claim section (optionally with one source mutation); return its verdict and checks."""
    return notebook_sections.run_section(NOTEBOOK, CLAIM_IDS, claim_id, replace, namespace)


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("ATTNREF_FIGURES", "off")
    monkeypatch.delenv("ATTNREF_SEED", raising=False)
    yield
    import matplotlib.pyplot as plt
    plt.close("all")


@pytest.mark.parametrize("claim_id", CLAIM_IDS)
def test_the_section_as_written_gives_the_expected_verdict(claim_id):
    verdict, checks = run_section(claim_id)
    failing = [c.name for c in checks if not c.passed]
    assert failing == [], failing
    assert verdict == claims.expected_verdict(claim_id)
    assert all(c.fails_if for c in checks), [c.name for c in checks if not c.fails_if]


# M1 ------------------------------------------------------------------------------------------

def test_m1_detached_weights_are_caught(monkeypatch):
    original = attnref.multi_head_attention

    def detached(*args, **kwargs):
        result = original(*args, **kwargs)
        return AttentionResult(result.output, result.weights.detach())   # weights cut off from X

    monkeypatch.setattr(attnref, "multi_head_attention", detached)
    verdict, checks = run_section("M1")
    assert_caught("M1", verdict, checks, "∂α/∂X of attnref − of torch's MultiheadAttention")


def test_m1_a_key_mixed_across_tokens_is_caught(monkeypatch):
    original = attnref.multi_head_attention

    def mixed(query, key=None, value=None, **kwargs):
        key = query if key is None else key
        leaky = key + 0.5 * key.roll(1, dims=-2)           # token l's key sees token l − 1
        return original(query, leaky, value if value is not None else key, **kwargs)

    monkeypatch.setattr(attnref, "multi_head_attention", mixed)
    verdict, checks = run_section("M1")
    assert_caught("M1", verdict, checks, "log(α_il / α_il′) along the sweep")


# M2 ------------------------------------------------------------------------------------------

def test_m2_window_off_by_one_is_caught(monkeypatch):
    original = attnref.sequence_layers.sliding_window_linear
    monkeypatch.setattr(attnref.sequence_layers, "sliding_window_linear",
                        lambda x, weight, bias=None: original(x.roll(-1, dims=-2), weight, bias))
    verdict, checks = run_section("M2")
    assert_caught("M2", verdict, checks, "sliding_window_linear − the window as an explicit loop")
    assert any("band" in c.name and not c.passed for c in checks)


def test_m2_reversed_window_is_caught(monkeypatch):
    original = attnref.sequence_layers.sliding_window_linear
    monkeypatch.setattr(attnref.sequence_layers, "sliding_window_linear",
                        lambda x, weight, bias=None: original(x, weight.flip(0), bias))
    verdict, checks = run_section("M2")
    assert_caught("M2", verdict, checks, "sliding_window_linear − the window as an explicit loop")


# M3 ------------------------------------------------------------------------------------------

def test_m3_causal_mask_at_every_length_is_caught(monkeypatch):
    original = attnref.multi_head_attention
    monkeypatch.setattr(attnref, "multi_head_attention",
                        lambda *args, **kwargs: original(*args, **{**kwargs, "causal": True}))
    verdict, checks = run_section("M3")
    assert_caught("M3", verdict, checks, "attnref − torch MultiheadAttention| over n")


def test_m3_nan_in_torchs_parameters_is_caught():
    # attnref refuses NaN inputs, so the NaN enters through torch's copy of the weights: every
    # parity error is NaN. Python's max(acc, err) kept 0.0 and passed; torch's max propagates it.
    verdict, checks = run_section("M3", (
        "module = weights.to_torch()\n",
        "module = weights.to_torch()\nwith torch.no_grad():\n    module.out_proj.bias[0] = float('nan')\n"))
    assert_caught("M3", verdict, checks, "attnref − torch MultiheadAttention| over n")


def test_attnref_refuses_nan_in_the_chapters_inputs():
    # The other way NaN could enter: attnref raises instead of computing with it.
    with pytest.raises(ValueError, match="NaN"):
        run_section("M3", ("    X = torch.randn(length, d_, generator=generator)\n",
                           "    X = torch.randn(length, d_, generator=generator)\n"
                           "    X[-1, -1] = float('nan')\n"))


# M4 ------------------------------------------------------------------------------------------

def test_m4_causal_mask_left_on_is_caught(monkeypatch):
    original = attnref.multi_head_attention
    monkeypatch.setattr(attnref, "multi_head_attention",
                        lambda *args, **kwargs: original(*args, **{**kwargs, "causal": True}))
    verdict, checks = run_section("M4")
    assert_caught("M4", verdict, checks, "SA(PX) − P SA(X), attnref")


def test_m4_positions_leaking_into_the_no_position_case_are_caught(monkeypatch):
    original = attnref.multi_head_attention

    def with_positions(query, key=None, value=None, **kwargs):
        key = query if key is None else key
        value = key if value is None else value
        E = attnref.sinusoidal_positional_encoding(key.shape[-2], key.shape[-1])
        return original(query, key + E, value, **kwargs)   # keys carry their positions

    monkeypatch.setattr(attnref, "multi_head_attention", with_positions)
    verdict, checks = run_section("M4")
    assert_caught("M4", verdict, checks, "SA(PX) − P SA(X), attnref")


def test_m4_an_ignored_causal_mask_is_caught(monkeypatch):
    original = attnref.multi_head_attention
    monkeypatch.setattr(attnref, "multi_head_attention",
                        lambda *args, **kwargs: original(*args, **{**kwargs, "causal": False}))
    verdict, checks = run_section("M4")
    assert_caught("M4", verdict, checks, "causal mask, no encodings")


# M5 ------------------------------------------------------------------------------------------

def _sinusoidal(n, d, *, swap=False, exponent_i=False, halves=False, **_):
    """Sinusoidal encodings with one of three plausible bugs (issue 44 item 12)."""
    positions = torch.arange(n, dtype=torch.float64)[:, None]
    steps = torch.arange(d // 2, dtype=torch.float64) if exponent_i else torch.arange(0, d, 2, dtype=torch.float64)
    angles = positions * 10000.0 ** (-steps / d)                       # (n, d/2)
    first, second = (torch.cos(angles), torch.sin(angles)) if swap else (torch.sin(angles), torch.cos(angles))
    if halves:
        return torch.cat([first, second], dim=-1)
    return torch.stack([first, second], dim=-1).reshape(n, d)


@pytest.mark.parametrize("bug", [{"swap": True}, {"exponent_i": True}, {"halves": True}],
                         ids=["sine and cosine swapped", "i for 2i in the exponent", "halves, not alternating"])
def test_m4_sinusoidal_encodings_off_their_closed_form_are_caught(monkeypatch, bug):
    """The encodings were only used, never checked: the supporting check against sin/cos of
    p / 10000^(2i/d), computed with Python's math, catches each bug."""
    assert torch.allclose(_sinusoidal(64, 16), attnref.sinusoidal_positional_encoding(64, 16), atol=1e-12)
    monkeypatch.setattr(attnref, "sinusoidal_positional_encoding", lambda n, d, *a, **k: _sinusoidal(n, d, **bug))
    verdict, checks = run_section("M4")
    assert_caught("M4", verdict, checks, "from Python's math")


def softmax_linear_attention(original):
    def softmaxed(query, key, value, **kwargs):
        scores = (query @ key.transpose(-2, -1)).softmax(dim=-1)     # a softmax slipped in
        return AttentionResult(scores @ value, scores, scores=query @ key.transpose(-2, -1))
    return softmaxed


def test_m5_bra_ket_sum_with_a_softmax_is_caught(monkeypatch):
    monkeypatch.setattr(attnref, "linear_attention", softmax_linear_attention(attnref.linear_attention))
    verdict, checks = run_section("M5")
    assert_caught("M5", verdict, checks, "linear_attention(I, Φ, Φ) − Σ_i φ_iᵀφ_i as a loop")


def test_m4_nan_in_torchs_parameters_is_caught():
    verdict, checks = run_section("M4", (
        "module = weights.to_torch()\n",
        "module = weights.to_torch()\nwith torch.no_grad():\n    module.out_proj.bias[0] = float('nan')\n"))
    assert_caught("M4", verdict, checks, "SA(PX) − P SA(X), torch")


def test_m5_a_nan_out_of_the_bra_ket_sum_is_caught(monkeypatch):
    original = attnref.linear_attention

    calls = []

    def overflowing(query, key, value, **kwargs):
        result = original(query, key, value, **kwargs)
        calls.append(1)
        if len(calls) > 1:                      # the first sum only (the Householder rows)
            return result
        output = result.output.clone()
        output[..., -1, -1] = float("nan")                                 # e.g. an inf − inf
        return AttentionResult(output, result.weights)

    monkeypatch.setattr(attnref, "linear_attention", overflowing)
    verdict, checks = run_section("M5")
    assert_caught("M5", verdict, checks, "linear_attention(I, Φ, Φ) − Σ_i φ_iᵀφ_i as a loop")


def test_m5_nan_in_a_demonstration_fails_it():
    # The harmonic frames are a demonstration (no vote), but a NaN arriving as the last error
    # (which Python's max(acc, err) dropped) must still fail their check.
    verdict, checks = run_section("M5", (
        "harmonic_errors.append((outer_sum(harmonic) - torch.eye(2)).abs().max())",
        "harmonic_errors.append((outer_sum(harmonic) - torch.eye(2)).abs().max()"
        " + (float('nan') if count == 12 else 0.0))"))
    harmonic = next(c for c in checks if c.name.startswith("harmonic frames"))
    assert not harmonic.passed and harmonic.bears_on == claims.DEMONSTRATION


# M6 ------------------------------------------------------------------------------------------

def test_m6_projector_check_catches_a_term_that_is_a_projector():
    """Issue 38 item 19: the check that |v⟩⟨k| is no projector fails if the term were v vᵀ/‖v‖²."""
    verdict, checks = run_section("M6", ("outer = v_col * k_col.T ",
                                         "outer = v_col * v_col.T / (v_col.T * v_col)[0, 0] "))
    assert_caught("M6", verdict, checks, "eq-m6-square")


def test_m6_scaled_linear_attention_is_caught(monkeypatch):
    original = attnref.linear_attention

    def scaled(query, key, value, **kwargs):
        result = original(query, key, value, **kwargs)
        scale = query.shape[-1] ** -0.5                                    # SDPA's 1/√d_k, copied over
        return result._replace(output=result.output * scale)

    monkeypatch.setattr(attnref, "linear_attention", scaled)
    verdict, checks = run_section("M6")
    assert_caught("M6", verdict, checks, "linear_attention − the bra-ket sum as a loop")


def test_m6_linear_attention_with_a_softmax_is_caught(monkeypatch):
    monkeypatch.setattr(attnref, "linear_attention", softmax_linear_attention(attnref.linear_attention))
    verdict, checks = run_section("M6")
    assert_caught("M6", verdict, checks, "linear_attention − the bra-ket sum as a loop")
    assert any(c.name.startswith("(a) orthogonal query") and not c.passed for c in checks)


# M7 ------------------------------------------------------------------------------------------

def test_m7_hull_test_with_its_sign_flipped_is_caught(monkeypatch):
    original = hull.separation
    monkeypatch.setattr(hull, "separation", lambda *args: -original(*args))
    verdict, checks = run_section("M7")
    assert_caught("M7", verdict, checks, "outside the 2-D hull (exact test)")


def test_m7_softmax_over_the_wrong_axis_is_caught(monkeypatch):
    def wrong_axis(query, key, value, **kwargs):
        scores = query @ key.transpose(-2, -1) / query.shape[-1] ** 0.5
        weights = scores.softmax(dim=-2)                                   # over the queries
        return AttentionResult(weights @ value, weights)

    monkeypatch.setattr(attnref, "scaled_dot_product_attention", wrong_axis)
    verdict, checks = run_section("M7")
    assert_caught("M7", verdict, checks, "row sum of the weights")
    assert any(c.name.startswith("max |attnref − torch") and not c.passed for c in checks)


def test_m7_a_hull_distance_that_never_leaves_is_caught(monkeypatch):
    original = hull.distance_to_hull

    def always_inside(points, vertices, tolerance=1e-12):
        distances, weights = original(points, vertices, tolerance)
        return torch.zeros_like(distances), weights

    monkeypatch.setattr(hull, "distance_to_hull", always_inside)
    verdict, checks = run_section("M7")
    assert_caught("M7", verdict, checks, "Wolfe's distance > 0 exactly where a weight is negative")
