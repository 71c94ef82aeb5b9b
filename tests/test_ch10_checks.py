"""Chapter 10's checks can fail: plausible bugs injected into ``attnref.analysis.ffn_memory`` (the code
the claims are about), into the notebook's derivations, or into the stored measurements move each
claim's verdict away from the expected one, and the check that catches it is named. Each test runs
the set-up cell and one claim section of ``notebooks/10-ffn-memory.ipynb`` in this process
(``tests/notebook_sections.py``).

The stored measurements of K3 (``make measure-ch10``) are held to the code and the models: the hash
of the code that produced them, the model files, and a re-measurement of the first sentences with
the current code (float32, one thread), which must reproduce the stored per-sentence sums.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnref.analysis import diff_attention, ffn_memory, hull, norms

import notebook_sections                     # tests/notebook_sections.py
from notebook_sections import assert_caught, with_nan

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "10-ffn-memory.ipynb"
CLAIM_IDS = ["K1", "K2", "K3", "W1", "W2", "W3", "W4", "N1", "N2", "N3", "N4"]


def run_section(claim_id, replace=None, namespace=None):
    return notebook_sections.run_section(NOTEBOOK, CLAIM_IDS, claim_id, replace, namespace)


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("ATTNREF_FIGURES", "off")
    yield


@pytest.mark.parametrize("claim_id", CLAIM_IDS)
def test_the_unmutated_section_gives_the_expected_verdict(claim_id):
    verdict, checks = run_section(claim_id)
    assert verdict == notebook_sections.claims.CLAIMS[claim_id].expected, [c.name for c in checks if not c.passed]


# --- K1 ------------------------------------------------------------------------------------------

def _slot_weights_without(part):
    original = ffn_memory.slot_weights

    def mutant(x, keys, bias=None, *, activation_name="relu", up=None):
        if part == "bias":
            bias = None
        if part == "up":
            up = None
        if part == "pairing":    # slot k's key paired with slot k+1's value
            keys = keys.roll(1, dims=1)
        return original(x, keys, bias, activation_name=activation_name, up=up)
    return mutant


@pytest.mark.parametrize("part", ["bias", "up", "pairing"])
def test_k1_a_slot_weight_that_drops_a_term_is_caught(part, monkeypatch):
    monkeypatch.setattr(ffn_memory, "slot_weights", _slot_weights_without(part))
    verdict, checks = run_section("K1")
    assert_caught("K1", verdict, checks, "|FFN − Σ_k a_k v_k")


def test_k1_a_slot_sum_that_skips_a_slot_is_caught(monkeypatch):
    original = ffn_memory.slot_sum_loop
    monkeypatch.setattr(ffn_memory, "slot_sum_loop", lambda a, v, b=None: original(a[..., :-1], v[:-1], b))
    verdict, checks = run_section("K1")
    assert_caught("K1", verdict, checks, "|FFN − Σ_k a_k v_k")


def test_k1_a_derivation_with_the_rows_as_keys_is_caught():
    verdict, checks = run_section("K1", ("phi((x * W_1[:, k])[0, 0] + b_1[0, k])",
                                         "phi((x * W_1[:, k])[0, 0] + b_1[0, 0])"))
    assert_caught("K1", verdict, checks, "undefined φ (sympy)")


def test_k1_a_gate_without_its_up_term_is_caught_in_sympy():
    verdict, checks = run_section("K1", ("(phi((x * G[:, k])[0, 0]) * (x * U[:, k])[0, 0])",
                                         "(phi((x * G[:, k])[0, 0]))"))
    assert_caught("K1", verdict, checks, "gated")


def test_k1_a_nan_in_the_slot_weights_is_caught(monkeypatch):
    monkeypatch.setattr(ffn_memory, "slot_weights", with_nan(ffn_memory.slot_weights))
    verdict, checks = run_section("K1")
    assert_caught("K1", verdict, checks, "|FFN − Σ_k a_k v_k")


# --- K2 ------------------------------------------------------------------------------------------

def test_k2_attention_at_the_default_scale_is_caught(monkeypatch):
    from attnref.attention import scaled_dot_product_attention

    def mutant(x, keys, values, bias=None):
        mask = None if bias is None else bias.expand(*x.shape[:-1], bias.shape[-1])
        return scaled_dot_product_attention(x, keys.T, values, mask=mask)     # 1/√d instead of 1
    monkeypatch.setattr(ffn_memory, "memory_as_attention", mutant)
    verdict, checks = run_section("K2")
    assert_caught("K2", verdict, checks, "attnref and torch SDPA")


def test_k2_a_memory_without_its_bias_is_caught(monkeypatch):
    original = ffn_memory.softmax_memory
    monkeypatch.setattr(ffn_memory, "softmax_memory", lambda x, k, v, b=None: original(x, k, v))
    verdict, checks = run_section("K2")
    assert_caught("K2", verdict, checks, "attnref and torch SDPA")


def test_k2_a_memory_normalised_over_tokens_is_caught(monkeypatch):
    def mutant(x, keys, values, bias=None):
        scores = x @ keys if bias is None else x @ keys + bias
        return torch.softmax(scores, dim=-2) @ values
    monkeypatch.setattr(ffn_memory, "softmax_memory", mutant)
    verdict, checks = run_section("K2")
    assert_caught("K2", verdict, checks, "attnref and torch SDPA")


def test_k2_a_derivation_normalised_wrongly_is_caught():
    verdict, checks = run_section("K2", ("softmax_row = s.applyfunc(sp.exp) / sum(sp.exp(e) for e in s)",
                                         "softmax_row = s.applyfunc(sp.exp) / sum(sp.exp(e) for e in s[:2])"))
    assert_caught("K2", verdict, checks, "symbolic scores (sympy)")


# --- K3: the stored measurements -------------------------------------------------------------------

def _load_with(change):
    original = ffn_memory.load

    def mutant(*args, **kwargs):
        data, provenance = original(*args, **kwargs)
        data = dict(data)
        change(data)
        return data, provenance
    return mutant


def test_k3_sparse_slots_in_one_model_are_caught(monkeypatch):
    def sparse(data):
        data["smollm2_slots90"] = 0.1 * data["smollm2_tokens"][:, None].expand_as(data["smollm2_slots90"])
    monkeypatch.setattr(ffn_memory, "load", _load_with(sparse))
    verdict, checks = run_section("K3")
    assert_caught("K3", verdict, checks, "smallest over the three models")


def test_k3_a_decomposition_that_misses_the_model_is_caught(monkeypatch):
    def wrong(data):
        data["gemma3_identity_error"] = data["gemma3_identity_error"] + 0.3
    monkeypatch.setattr(ffn_memory, "load", _load_with(wrong))
    verdict, checks = run_section("K3")
    assert_caught("K3", verdict, checks, "Gemma 3: largest |Σ_k a_k v_k − the model's FFN|")


def test_k3_a_nan_in_the_stored_shares_is_caught(monkeypatch):
    def nan(data):
        data["minilm_slots90"] = data["minilm_slots90"].clone()
        data["minilm_slots90"][0, 0] = float("nan")
    monkeypatch.setattr(ffn_memory, "load", _load_with(nan))
    verdict, checks = run_section("K3")
    assert verdict != "does not hold"


def test_k3_share_needed_counts_the_largest_entries_first():
    mass = torch.tensor([[0.05, 0.6, 0.05, 0.3]], dtype=torch.float64)
    assert ffn_memory.share_needed(mass, 0.9).item() == 0.5          # 0.6 + 0.3
    assert ffn_memory.share_needed(mass, 0.95).item() == 0.75
    sets = ffn_memory.top_sets(mass, 0.5)
    assert sets.tolist() == [[False, True, False, True]]
    assert ffn_memory.overlap_sums(sets, sets).item() == 1.0


# --- W1–W4 ----------------------------------------------------------------------------------------

def test_w1_lambda_on_the_wrong_map_is_caught(monkeypatch):
    original = diff_attention.differential_attention
    monkeypatch.setattr(diff_attention, "differential_attention",
                        lambda q1, k1, q2, k2, v, lam, **kw: original(q2, k2, q1, k1, v, lam, **kw))
    verdict, checks = run_section("W1")
    assert_caught("W1", verdict, checks, "attnref − torch SDPA")


def test_w1_a_map_renormalised_after_the_subtraction_is_caught(monkeypatch):
    original = diff_attention.differential_weights
    monkeypatch.setattr(diff_attention, "differential_weights",
                        lambda a, b, lam: (lambda w: w / w.sum(-1, keepdim=True))(original(a, b, lam)))
    verdict, checks = run_section("W1")
    assert_caught("W1", verdict, checks, "row sum − (1 − λ)")


def test_w1_a_derivation_without_the_minus_is_caught():
    verdict, checks = run_section("W1", ("w = softmax(s1) - lam * softmax(s2)", "w = softmax(s1) + lam * softmax(s2)"))
    assert_caught("W1", verdict, checks, "= 1 − λ, symbolic")


def test_w2_lambda_the_wrong_way_round_is_caught(monkeypatch):
    def mutant(sink_rows, block_share, rule=diff_attention.SINK_RULE):
        blocks = (block_share > rule["sink_block"]).nonzero().flatten()
        residuals = []
        for layer in blocks.tolist():
            totals = sink_rows[layer].sum(-1)
            big, small = totals.topk(2).indices
            lam = totals[big] / totals[small]                         # ≥ 1: larger over smaller
            first, second = sink_rows[layer, small], sink_rows[layer, big]
            residuals.append((first - lam * second).abs().sum() / first.sum())
        return torch.stack(residuals), blocks
    monkeypatch.setattr(diff_attention, "sink_residual", mutant)
    verdict, checks = run_section("W2")
    assert_caught("W2", verdict, checks, "median over its")


def test_w2_a_model_without_sinks_is_not_established(monkeypatch):
    def flat(data):
        data["gemma3_sink"] = torch.full_like(data["gemma3_sink"], 0.01)
    monkeypatch.setattr(ffn_memory, "load", _load_with(flat))
    verdict, checks = run_section("W2")
    assert verdict == "not established"
    assert_caught("W2", verdict, checks, "Gemma 3: sink blocks")


def test_w3_a_hull_test_that_sees_everything_inside_is_caught(monkeypatch):
    original = hull.distance_to_hull
    monkeypatch.setattr(hull, "distance_to_hull", lambda p, v, *a: (torch.zeros(p.shape[0]), original(p, v)[1]))
    verdict, checks = run_section("W3")
    assert_caught("W3", verdict, checks, "Wolfe distance")


def test_w3_a_derivation_on_the_wrong_face_is_caught():
    verdict, checks = run_section("W3", ("w3_distance_sq = sp.simplify(nearest_sq.subs(solution))",
                                         "w3_distance_sq = sp.simplify(nearest_sq.subs({a: 0, b: 0}))"))
    assert_caught("W3", verdict, checks, "squared distance")


def test_w4_a_softmax_without_the_null_slot_is_caught(monkeypatch):
    monkeypatch.setattr(diff_attention, "softmax_one", lambda s, dim=-1: torch.softmax(s, dim=dim))
    verdict, checks = run_section("W4")
    assert_caught("W4", verdict, checks, "total weight (→ 0)")


def test_w4_a_null_slot_shifted_by_the_maximum_wrongly_is_caught(monkeypatch):
    def mutant(scores, dim=-1):
        top = scores.amax(dim=dim, keepdim=True)
        e = (scores - top).exp()
        return e / (1 + e.sum(dim=dim, keepdim=True))               # the 1 not shifted with the scores
    monkeypatch.setattr(diff_attention, "softmax_one", mutant)
    verdict, checks = run_section("W4")
    assert_caught("W4", verdict, checks, "softmax₁ attention − attention over a zero key")


def test_w4_a_null_key_with_a_value_is_caught(monkeypatch):
    from attnref.attention import scaled_dot_product_attention

    def mutant(q, k, v, *, scale=None):
        zero_k = k.new_zeros(1, k.shape[-1])
        return scaled_dot_product_attention(q, torch.cat([zero_k, k]), torch.cat([v.mean(0, keepdim=True), v]))
    monkeypatch.setattr(diff_attention, "with_null_key", mutant)
    verdict, checks = run_section("W4")
    assert_caught("W4", verdict, checks, "softmax₁ attention − attention over a zero key")


# --- N1–N4 ----------------------------------------------------------------------------------------

def test_n1_batchnorm_with_per_sequence_statistics_is_caught(monkeypatch):
    def mutant(x, eps=1e-5, key_mask=None):
        return (x - x.mean(1, keepdim=True)) / torch.sqrt(x.var(1, unbiased=False, keepdim=True) + eps)
    monkeypatch.setattr(norms, "batch_norm_tokens", mutant)
    verdict, checks = run_section("N1")
    assert_caught("N1", verdict, checks, "batch_norm_tokens − torch")


def test_n1_a_key_mask_that_is_ignored_is_caught(monkeypatch):
    original = norms.batch_norm_tokens
    monkeypatch.setattr(norms, "batch_norm_tokens", lambda x, eps=1e-5, key_mask=None: original(x, eps))
    verdict, checks = run_section("N1")
    assert_caught("N1", verdict, checks, "key mask")


def test_n2_a_biased_running_variance_is_caught(monkeypatch):
    def mutant(batches, momentum=0.1):
        mean = torch.zeros(batches[0].shape[-1], dtype=batches[0].dtype)
        var = torch.ones_like(mean)
        for batch in batches:
            mean = (1 - momentum) * mean + momentum * batch.mean(0)
            var = (1 - momentum) * var + momentum * batch.var(0, unbiased=False)
        return mean, var
    monkeypatch.setattr(norms, "running_statistics", mutant)
    verdict, checks = run_section("N2")
    assert_caught("N2", verdict, checks, "running mean and variance")


def test_n3_attention_without_its_causal_mask_is_caught(monkeypatch):
    from attnref.attention import scaled_dot_product_attention
    from attnref.decoder import rms_norm

    def mutant(x, norm, eps=1e-5):
        y = scaled_dot_product_attention(x, x, x).output                 # the mask forgotten
        if norm == "batch":
            return norms.batch_norm_tokens(y, eps)
        if norm == "layer":
            return torch.nn.functional.layer_norm(y, y.shape[-1:], eps=eps)
        return rms_norm(y, eps=eps)
    monkeypatch.setattr(norms, "causal_block", mutant)
    verdict, checks = run_section("N3")
    assert_caught("N3", verdict, checks, "LayerNorm and RMSNorm behind causal attention")


def test_n4_a_gap_against_a_shifted_layernorm_is_caught(monkeypatch):
    original = norms.centring_gap
    monkeypatch.setattr(norms, "centring_gap", lambda x, eps=1e-6: original(x + 0.5, eps))
    verdict, checks = run_section("N4")
    assert_caught("N4", verdict, checks, "measured gap − √(2 − 2√(1 − ρ²))")


def test_n4_stored_gaps_that_do_not_fit_the_formula_are_caught(monkeypatch):
    def wrong(data):
        data["gemma3_gap"] = data["gemma3_gap"] * 1.1
    monkeypatch.setattr(ffn_memory, "load", _load_with(wrong))
    verdict, checks = run_section("N4")
    assert_caught("N4", verdict, checks, "Gemma 3: |measured gap − formula")


# --- K3: the stored numbers still match the code and the models ------------------------------------

@pytest.fixture(scope="module")
def stored():
    try:
        return ffn_memory.load(ROOT)
    except ffn_memory.StaleMeasurements as error:
        pytest.fail(str(error))


def test_the_stored_measurements_were_made_with_this_code(stored):
    _, provenance = stored
    assert provenance["source_sha256"] == ffn_memory.source_hash(ROOT)
    assert provenance["rule"] == ffn_memory.RULE


@pytest.mark.parametrize("key", ["minilm", "smollm2"])
def test_a_sentence_measured_again_gives_the_stored_sums(stored, key):
    import sys
    sys.path.insert(0, str(ROOT / "tools"))
    import measure_ch10
    data, provenance = stored
    if key == "smollm2":
        from attnref.analysis import decoder_measure as dm
        from attnref.models import smollm
        try:
            assert dm.file_hash(smollm.model_path()) == provenance["model_sha256"]["smollm2"]
        except FileNotFoundError as error:
            pytest.skip(str(error))
    torch.set_num_threads(1)
    model, ids, config = measure_ch10.load_model(key, ROOT)
    again = measure_ch10.measure_sentence(key, model, ids[0], config)
    for name in ("slots90", "negative", "attn90", "attn_rows"):
        stored_value = data[f"{key}_{name}"][0]
        assert torch.allclose(again[name], stored_value, rtol=1e-4, atol=1e-6), name
    assert again["identity_error"].max() <= 1e-5


# --- attnref audit runs W2 and N4 with the chapter's functions ------------------------------------------

def _fake_model(first_weights):
    """A stand-in for attnref.audit.families.Loaded: one block whose heads put ``first_weights[h][t]``
    on the first token in row t (the rest spread evenly), and a random residual stream."""
    from attnref.audit.families import Run
    h, n = len(first_weights), len(first_weights[0])
    w = torch.zeros(h, n, n, dtype=torch.float64)
    for head, row_weights in enumerate(first_weights):
        for t, m in enumerate(row_weights):
            w[head, t, 0] = m if t else 1.0
            if t:
                w[head, t, 1:t + 1] = (1 - m) / t
    hidden = [torch.randn(n, 16, generator=torch.Generator().manual_seed(0)) + 0.3 for _ in range(2)]

    class Fake:
        causal = True
        run = staticmethod(lambda ids: Run(hidden, None, None, [w]))
    return Fake()


def _audit_verdict(cid, model):
    from attnref.audit import recheck_ch10, rechecks
    from attnref.book import claims
    measure, record = rechecks.EXTENSIONS[cid]
    assert (measure, record) == {"W2": (recheck_ch10.measure_w2, recheck_ch10.record_w2),
                                 "N4": (recheck_ch10.measure_n4, recheck_ch10.record_n4)}[cid]
    m = {cid: measure(model, None, list(range(6)), None)}
    evidence = rechecks._Recheck(cid, "a checkpoint")            # what the audit records into
    record(evidence, m)
    return claims.decide(evidence.checks), evidence.checks


def test_the_audit_decides_w2_by_the_chapters_rule():
    from attnref.audit import rechecks
    rechecks.load_extensions()
    agree = _fake_model([[0, 0.8, 0.8, 0.7, 0.9, 0.8], [0, 0.6, 0.6, 0.525, 0.675, 0.6]])   # proportional rows
    verdict, _ = _audit_verdict("W2", agree)
    assert verdict == "holds"
    disagree = _fake_model([[0, 0.95, 0.6, 0.95, 0.6, 0.95], [0, 0.55, 0.95, 0.55, 0.95, 0.55]])
    verdict, checks = _audit_verdict("W2", disagree)
    assert verdict == "not established" and any("median over its" in c.name and not c.passed for c in checks)
    no_sink = _fake_model([[0, 0.1, 0.1, 0.1, 0.1, 0.1], [0, 0.2, 0.2, 0.2, 0.2, 0.2]])
    verdict, checks = _audit_verdict("W2", no_sink)
    assert verdict == "not established" and any("sink blocks" in c.name and not c.passed for c in checks)


def test_the_audit_decides_n4_by_the_chapters_check(monkeypatch):
    from attnref.audit import rechecks
    rechecks.load_extensions()
    model = _fake_model([[0, 0.5, 0.5, 0.5, 0.5, 0.5], [0, 0.5, 0.5, 0.5, 0.5, 0.5]])
    assert _audit_verdict("N4", model)[0] == "holds"
    original = norms.centring_gap
    monkeypatch.setattr(norms, "centring_gap", lambda x, eps=1e-6: original(x + 0.5, eps))
    verdict, checks = _audit_verdict("N4", model)
    assert verdict != "holds" and any("formula from measured ρ" in c.name and not c.passed for c in checks)
