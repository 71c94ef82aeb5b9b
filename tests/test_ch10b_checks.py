"""Chapter 10b's checks can fail: plausible bugs injected into ``attnref.analysis.basis`` and
``attnref.analysis.gate`` (the code the claims are about), into the notebook's derivations, or into
the stored measurements move each claim's verdict away from the expected one, and the check that
catches it is named. Each test runs the set-up cell and one claim section of
``notebooks/10b-basis-and-gates.ipynb`` in this process (``tests/notebook_sections.py``).

The stored measurements of P1 on SmolLM2 and Gemma 3 (``make measure-ch10b``) are held to the code
(the hash of the code that produced them), the model file, and a re-measurement of SmolLM2's first
two blocks on the same sentences with the current code.
"""

from __future__ import annotations

import copy
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from attnref.analysis import basis, gate

import notebook_sections                     # tests/notebook_sections.py
from notebook_sections import assert_caught

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "10b-basis-and-gates.ipynb"
CLAIM_IDS = ["P1", "P2", "P3", "S1", "S2"]


def run_section(claim_id, replace_=None, namespace=None):
    return notebook_sections.run_section(NOTEBOOK, CLAIM_IDS, claim_id, replace_, namespace)


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("ATTNREF_FIGURES", "off")
    yield


@pytest.mark.parametrize("claim_id", CLAIM_IDS)
def test_the_unmutated_section_gives_the_expected_verdict(claim_id):
    verdict, checks = run_section(claim_id)
    assert verdict == notebook_sections.claims.CLAIMS[claim_id].expected, [c.name for c in checks if not c.passed]


# --- P1 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bug", basis.BUGS)
def test_p1_a_rotation_with_a_planted_bug_is_caught(bug, monkeypatch):
    original = basis.rotate_smollm
    monkeypatch.setattr(basis, "rotate_smollm", lambda model, Q, bug_=None, **k: original(model, Q, bug=bug))
    verdict, checks = run_section("P1")
    assert_caught("P1", verdict, checks, "small decoder: float64 logit error")


def test_p1_a_derivation_that_folds_the_gain_on_the_wrong_side_is_caught():
    verdict, checks = run_section("P1", ("(Q_sym.T * g * W)", "(g * Q_sym.T * W)"))
    assert_caught("P1", verdict, checks, "folded read-in")


def test_p1_a_norm_with_a_per_coordinate_statistic_is_caught():
    verdict, checks = run_section("P1", ("rms = lambda z: sp.sqrt(square(z) / 3 + eps)",
                                         "rms = lambda z: sp.sqrt(z[0] ** 2 + eps)"))
    assert_caught("P1", verdict, checks, "RMSNorm(xQ) − RMSNorm(x) Q")


@pytest.mark.parametrize("key,label", [("smollm2", "SmolLM2"), ("gemma3", "Gemma 3")])
def test_p1_a_stored_model_error_that_is_not_round_off_is_caught(key, label):
    stored = copy.deepcopy(basis.load())
    stored["models"][key]["error64"][0] = 1e-3            # e.g. a weight left unrotated in the measurement
    verdict, checks = run_section("P1", namespace={"stored": stored})
    assert_caught("P1", verdict, checks, f"{label}: float64 logit error")


def test_p1_a_nan_in_the_stored_measurements_never_passes():
    stored = copy.deepcopy(basis.load())
    stored["models"]["gemma3"]["error64"][1] = math.nan
    verdict, checks = run_section("P1", namespace={"stored": stored})
    assert_caught("P1", verdict, checks, "Gemma 3: float64 logit error")


def test_p1_stored_planted_bugs_that_were_not_seen_are_caught():
    stored = copy.deepcopy(basis.load())
    stored["models"]["smollm2"]["bugs"]["read-ins only"]["error64"] = [0.0] * 4
    verdict, checks = run_section("P1", namespace={"stored": stored})
    assert_caught("P1", verdict, checks, "SmolLM2: smallest relative logit error of the 3 planted bugs")


# --- P2 ------------------------------------------------------------------------------------------

def _stack_rotation_without(part):
    original = basis.rotate_stack

    def mutant(stack, Q):
        rotated = original(stack, Q)
        layers = []
        for old, new in zip(stack.layers, rotated.layers):
            if part == "w_o":
                new = replace(new, attention=replace(new.attention, w_o=old.attention.w_o, b_o=old.attention.b_o))
            if part == "w_1":
                new = replace(new, ffn=replace(new.ffn, w_1=old.ffn.w_1))
            layers.append(new)
        return type(rotated)(tuple(layers))
    return mutant


@pytest.mark.parametrize("part", ["w_o", "w_1"])
def test_p2_a_stack_rotation_that_skips_a_weight_is_caught(part, monkeypatch):
    monkeypatch.setattr(basis, "rotate_stack", _stack_rotation_without(part))
    verdict, checks = run_section("P2")
    assert_caught("P2", verdict, checks, "Q with 𝟙Q = 𝟙: float64 error")


def test_p2_a_q_that_does_not_keep_the_ones_direction_is_caught(monkeypatch):
    monkeypatch.setattr(basis, "orthogonal_fixing_ones", basis.random_orthogonal)
    verdict, checks = run_section("P2")
    assert_caught("P2", verdict, checks, "Q with 𝟙Q = 𝟙: float64 error")


def test_p2_a_derivation_with_the_wrong_axis_is_caught():
    verdict, checks = run_section("P2", ("axis = sp.Matrix([1, 1, 1])", "axis = sp.Matrix([1, 0, 0])"))
    assert_caught("P2", verdict, checks, "𝟙 Q = 𝟙")


# --- P3 ------------------------------------------------------------------------------------------

def test_p3_a_stack_without_its_relu_is_caught():
    verdict, checks = run_section("P3", ('RELU = "pre-LN, ReLU after the sums"', 'RELU = "pre-LN"'))
    assert_caught("P3", verdict, checks, "ReLU after the sums, Q with 𝟙Q = 𝟙")


def test_p3_a_permutation_that_is_a_rotation_is_caught(monkeypatch):
    monkeypatch.setattr(basis, "random_permutation", basis.orthogonal_fixing_ones)
    verdict, checks = run_section("P3")
    assert_caught("P3", verdict, checks, "random permutation")


def test_p3_an_activation_that_mixes_coordinates_is_caught():
    verdict, checks = run_section("P3", ("relu = lambda z: z.applyfunc(lambda e: sp.Max(0, e))",
                                         "relu = lambda z: z.applyfunc(lambda e: sp.Max(0, e)) * sp.Matrix(z.cols, z.cols, lambda i, j: 1 + i * (j - 1))"))
    assert_caught("P3", verdict, checks, "ReLU(xP) − ReLU(x) P")


# --- S1 ------------------------------------------------------------------------------------------

def test_s1_a_constant_gate_is_caught(monkeypatch):
    monkeypatch.setattr(gate, "gate_values", lambda x, w_g, b_g=None: torch.full((x.shape[0], w_g.shape[1]), 0.5,
                                                                                  dtype=x.dtype))
    verdict, checks = run_section("S1")
    assert_caught("S1", verdict, checks, "with the gate:")


def test_s1_a_gate_on_the_wrong_axis_is_caught(monkeypatch):
    original = gate.gate_values
    monkeypatch.setattr(gate, "gate_values", lambda x, w_g, b_g=None: original(x, w_g, b_g).flip(0))
    verdict, checks = run_section("S1")
    assert_caught("S1", verdict, checks, "torch (sigmoid, SDPA 4-D)")


def test_s1_a_derivation_without_the_gate_is_caught():
    verdict, checks = run_section("S1", ("gated_1 = lambda z: 1 / (1 + sp.exp(-wg * z)) * z * wv * wo",
                                         "gated_1 = lambda z: z * wv * wo"))
    assert_caught("S1", verdict, checks, "f(2x) − 2 f(x) ≠ 0")


# --- S2 ------------------------------------------------------------------------------------------

def test_s2_a_gate_after_w_o_is_caught(monkeypatch):
    generator = torch.Generator().manual_seed(0)
    wide = torch.randn(16, 16, generator=generator, dtype=torch.float64) / 4

    def after_w_o(x, a, w_v, w_o, w_g=None, b_g=None):          # σ(X W) ⊙ (A X W_V W^O): d gates, after W^O
        return torch.sigmoid(x @ wide) * (a @ x @ w_v @ w_o)
    monkeypatch.setattr(gate, "head_output", after_w_o)
    verdict, checks = run_section("S2")
    assert_caught("S2", verdict, checks, "numerical rank of 300 gated output rows")


def test_s2_a_token_map_without_w_o_is_caught(monkeypatch):
    monkeypatch.setattr(gate, "token_maps", lambda x, w_v, w_o, w_g=None, b_g=None:
                        torch.eye(x.shape[1], dtype=x.dtype).expand(x.shape[0], -1, -1))
    verdict, checks = run_section("S2")
    assert_caught("S2", verdict, checks, "largest numerical rank of the 6 tokens' maps")


# --- the code's answers to bad input --------------------------------------------------------------

def test_bad_input_names_the_argument_and_the_shapes():
    x = torch.randn(4, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"a must be the \(4, 4\)"):
        gate.head_output(x, torch.eye(3, dtype=torch.float64), torch.randn(8, 2), torch.randn(2, 8))
    with pytest.raises(ValueError, match=r"w_o must have shape \(2, 8\)"):
        gate.head_output(x, torch.eye(4, dtype=torch.float64), torch.randn(8, 2), torch.randn(3, 8))
    with pytest.raises(ValueError, match=r"Q must be a \(16, 16\) tensor"):
        basis.rotate_smollm(basis.random_smollm(torch.Generator().manual_seed(0)), torch.eye(8, dtype=torch.float64))
    with pytest.raises(ValueError, match="Q must be orthogonal"):
        basis.rotate_smollm(basis.random_smollm(torch.Generator().manual_seed(0)), 2 * torch.eye(16, dtype=torch.float64))
    with pytest.raises(ValueError, match="bug must be one of"):
        basis.rotate_smollm(basis.random_smollm(torch.Generator().manual_seed(0)), torch.eye(16, dtype=torch.float64),
                            bug="typo")


def test_the_changes_of_basis_are_what_they_say():
    generator = torch.Generator().manual_seed(3)
    eye = torch.eye(16, dtype=torch.float64)
    for Q in (basis.random_orthogonal(16, generator), basis.orthogonal_fixing_ones(16, generator),
              basis.random_permutation(16, generator)):
        assert (Q.T @ Q - eye).abs().max() < 1e-13
    ones = torch.ones(16, dtype=torch.float64)
    assert (ones @ basis.orthogonal_fixing_ones(16, generator) - ones).abs().max() < 1e-13
    assert (ones @ basis.random_orthogonal(16, generator) - ones).abs().max() > 0.1
    assert math.isnan(basis.relative_error(torch.tensor([math.nan]), torch.tensor([1.0])))
    assert basis.roundoff_ratio(1.0, 1.0) > 1e8                  # a bug: both errors of order 1


# --- the stored measurements --------------------------------------------------------------------

def test_the_stored_measurements_are_current_and_complete():
    record = basis.load()                                      # raises if measured with other code
    assert record["torch"] and record["date"] and record["machine"]["torch"] == record["torch"]
    for key in basis.MODELS.values():
        m = record["models"][key]
        assert len(m["error64"]) == len(m["error32"]) == m["sentences"] == len(m["tokens"]) >= 1
        assert len(m["block_error64"]) == m["layers"] + 1 and set(m["bugs"]) == set(basis.BUGS)
        assert len(record["model_sha256"][key]) == 64


def test_a_re_measurement_of_smollm2s_first_blocks_reproduces_the_stored_numbers():
    """Two blocks of SmolLM2 on the stored sentences, with the current code: the model file is the one
    measured, every round-off error stays within its bound and within 32 times the stored one (other
    CPU kernels round differently), every planted bug's error agrees to 1e-6."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import measure_ch10b as tool
    finally:
        sys.path.pop(0)
    from attnref.analysis import decoder_measure as dm
    from attnref.models import smollm
    record = basis.load()
    stored = record["models"]["smollm2"]
    assert dm.file_hash(smollm.model_path()) == record["model_sha256"]["smollm2"], "another SmolLM2 file"
    model, _ = tool.load_model("smollm2", layers=2)
    ids = tool.stored_ids(ROOT, "smollm2")[:stored["sentences"]]
    again = tool.measure_model("smollm2", model, ids, say=lambda *_: None)
    for block in range(3):
        new, old = again["block_error64"][block], stored["block_error64"][block]
        assert new <= basis.roundoff_bound(again["block_error32"][block]) or new <= 1e-14, (block, new)
        assert new <= 32 * max(old, 1e-16) and old <= 32 * max(new, 1e-16), (block, new, old)
        for bug, values in stored["bugs"].items():
            a, b = again["bugs"][bug]["block_error64"][block], values["block_error64"][block]
            assert abs(a - b) <= 1e-6 * max(abs(a), abs(b)) + 1e-12, (bug, block, a, b)
