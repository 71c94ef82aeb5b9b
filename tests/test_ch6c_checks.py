"""Chapter 6c's measurements (attnref.analysis.qknorm_model) mean what the chapter says, checked on
a tiny random Gemma 3 built from transformers' modules (tests/test_gemma3.py) — no model file:

* G1: every key lies on its gain ellipsoid and each key's witness D⁻²k̂ makes it the unique best
  (gaps against a brute-force maximisation over random points of the ellipsoid); without QK-norm
  the keys leave the ellipsoid; a zero gain is counted.
* G2: the fused form equals the model's scores; with the gains left out it does not.
* G3: no input, however large, gives a logit above the bound; the bound is nearly reached by the
  inputs that align with the largest gains.
* G4: a sliding block's mass beyond the window is exactly 0, a global block's is not; masses sum to 1.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
import math

import pytest
import torch

from attnref.analysis import qknorm_model as qm
from attnref.models import gemma3

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def tiny():
    from test_gemma3 import attnref_model, tiny_model
    return attnref_model(tiny_model(seed=3))


IDS = torch.tensor([5, 17, 3, 44, 9, 12, 21, 8, 30, 2, 41, 7])


def test_g1_keys_on_the_ellipsoid_and_witnesses_win(tiny):
    result = qm.selectability(tiny, IDS)
    assert result["radius_dev"].max() < 1e-12
    assert (result["zero_gains"] == 0).all()
    assert (result["witness_gap"] > 0).all()
    # brute force: the witness of key 0 scores it above 20 000 random points of the same ellipsoid
    out = gemma3.forward(tiny, IDS, logits=False)
    k_hat = out.blocks[0].trace.attention.trace.normed_key[0]            # (n, d_k)
    g_k = 1 + tiny.layers[0].k_norm
    witness = k_hat[0] / g_k.pow(2)
    u = torch.randn(20000, tiny.config.d_k, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    radius = (k_hat[0] / g_k).norm()
    points = u / u.norm(dim=-1, keepdim=True) * radius * g_k             # on the ellipsoid of key 0
    assert (points @ witness).max() < witness @ k_hat[0]


def test_g1_without_qk_norm_the_keys_leave_the_ellipsoid(tiny, monkeypatch):
    import attnref.models.gemma3 as module
    monkeypatch.setattr(module, "qk_rms_norm", lambda x, w, eps: x * (1 + w))       # the mutant: no RMS division
    assert qm.selectability(tiny, IDS)["radius_dev"].max() > 1e-3


def test_g1_counts_a_zero_gain(tiny):
    layers = [dataclasses.replace(w, k_norm=w.k_norm.clone().index_fill_(0, torch.tensor([1, 4]), -1.0))
              for w in tiny.layers]
    result = qm.selectability(dataclasses.replace(tiny, layers=layers), IDS)
    assert (result["zero_gains"] == 2).all()


def test_g2_fused_form_equals_the_scores_and_needs_the_gains(tiny, monkeypatch):
    result = qm.fused_form(tiny, IDS)
    assert result["fused_error"].max() < 1e-12 and result["rotated_error"].max() < 1e-12
    live = ((1 + tiny.layers[0].q_norm) * (1 + tiny.layers[0].k_norm) != 0).sum()
    sigma = result["fused_sigma"][0]
    assert ((sigma > sigma[..., :1] * 1e-10).sum(-1) == min(int(live), 8)).all()
    monkeypatch.setattr(qm, "_gains", lambda model, layer: (torch.ones(8, dtype=torch.float64),) * 2)
    wrong = qm.fused_form(tiny, IDS)
    assert wrong["fused_error"].max() > 1e-3


def test_g3_no_input_exceeds_the_bound(tiny):
    bounds = qm.logit_bounds(tiny)
    generator = torch.Generator().manual_seed(5)
    largest = torch.zeros(len(tiny.layers), dtype=torch.float64)
    for scale in (1e-3, 1.0, 1e4):
        x = torch.randn(40, tiny.config.d, generator=generator, dtype=torch.float64) * scale
        for l in range(len(tiny.layers)):
            trace = gemma3.attention(x, weights=tiny.layers[l], config=tiny.config, layer=l).trace
            k = trace.rotated_key.repeat_interleave(tiny.config.h // tiny.config.h_kv, 0)
            scores = tiny.config.scale * trace.rotated_query @ k.transpose(-2, -1)
            largest[l] = max(largest[l], scores.abs().max())
    assert (largest <= bounds["bound_rotated"]).all()
    slack = 1 + 1e-12                                                        # the same products, rounded in another order
    assert (bounds["bound_aligned"] <= bounds["bound_rotated"] * slack).all()
    assert (bounds["bound_rotated"] <= bounds["bound_loose"] * slack).all()
    # the bound is reached: unit-RMS u_q, u_k on the coordinate of the largest g_q∘g_k give c·d_k·g_q,a·g_k,a
    g_q, g_k = 1 + tiny.layers[0].q_norm, 1 + tiny.layers[0].k_norm
    a = int((g_q * g_k).abs().argmax())
    u = torch.zeros(8, dtype=torch.float64)
    u[a] = math.sqrt(8)
    assert torch.isclose(tiny.config.scale * (g_q * u) @ (g_k * u), bounds["bound_aligned"][0].to(u) * torch.sign(g_q[a] * g_k[a]))


def test_g4_window_mass(tiny):
    ids = torch.arange(1, 10)                                                # n = 9 > window 3
    result = qm.distance_mass(tiny, ids, edges=(0, 1, 2, 3, 6))
    assert result["beyond_window"][0].max() == 0                             # block 0 slides
    assert result["beyond_window"][1].min() > 0                              # block 1 is global
    assert torch.allclose(result["distance_mass"].sum(-1), torch.ones(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="longer than the window"):
        qm.distance_mass(tiny, ids[:3])


def test_sentence_sums_mean_what_they_say(tiny):
    result = qm.sentence_sums(tiny, IDS)
    out = gemma3.forward(tiny, IDS, logits=False)
    weights = out.blocks[0].weights                                          # (h, n, n)
    assert torch.allclose(result["sink_mass"][0], weights[:, 1:, 0].sum(-1))
    assert torch.allclose(result["max_weight"][0], weights[:, 1:].amax((-1, -2)))
    assert (result["min_entropy"] >= 0).all() and (result["rows"] == IDS.numel() - 1).all()


# --- the audit's rechecks, read from the stored reports (data/audit, make audit-models) -------------------

@pytest.mark.parametrize("name", ["minilm", "smollm2", "gemma3"])
def test_a_stored_report_read_back_gives_the_audits_own_checks(name):
    """Chapter 6c decides C6, H2, L4, A2, C9 and D1 on Gemma 3 from the stored report: the
    measurements read back (rechecks.from_plain) and recorded (rechecks.record) must give exactly
    the checks and verdicts the audit wrote — values, intervals, margins and false-failure rates
    (a reader that lost an interval's standard error, or read a threshold wrongly, differs here)."""
    import json

    from attnref.audit import book_models, rechecks
    from attnref.book import claims
    try:
        report = book_models.stored(name)
    except FileNotFoundError as error:
        pytest.fail(str(error))
    again = rechecks.verdicts(report["model"]["name"], rechecks.from_plain(report["measurements"]))
    assert list(again) == list(report["rechecks"])
    for cid, (verdict, checks) in again.items():
        assert verdict == report["rechecks"][cid]["verdict"], cid
        assert json.loads(json.dumps([claims._as_dict(c) for c in checks])) == report["rechecks"][cid]["checks"], cid


def test_the_pages_gemma_rechecks_are_the_audits():
    """The registry's rechecks of Gemma 3 that the audit makes are expected to be what the stored
    audit report decided (the page records exactly the audit's checks)."""
    from attnref.audit import book_models, rechecks
    from attnref.book import claims
    report = book_models.stored("gemma3")
    for cid in ("H2", "C6", "L4", "A2", "C9", "D1"):
        assert claims.RECHECKS[(cid, "Gemma-3-270M")] == report["rechecks"][cid]["verdict"], cid
    assert set(rechecks.RECHECKS) >= {"H2", "C6", "L4", "A2", "C9", "D1"}


# --- C9, one definition (issue 44 item 1) -----------------------------------------------------------

def _stored_verdicts(notebook: str) -> dict:
    import json
    cells = json.loads((Path(__file__).resolve().parent.parent / "notebooks" / notebook).read_text())["cells"]
    found = {}
    for cell in cells:
        for output in cell.get("outputs", []):
            meta = output.get("metadata", {}).get("attnref_verdict")
            if meta:
                found[(meta["id"], meta["model"])] = meta
    return found


def test_c9_has_one_verdict_per_model_in_the_chapters_the_audit_and_the_registry():
    """C9 on every trained model: the chapter that decides it (6, 6b, 6c), `attnref audit`'s stored
    report of the same model, and the registry give one verdict (round 5 found holds / not
    established for MiniLM and SmolLM2)."""
    from attnref.audit import book_models
    from attnref.book import claims
    chapters = {"all-MiniLM-L6-v2": "06-trained-model.ipynb", "SmolLM2-135M-Instruct": "06b-trained-decoder.ipynb",
                "Gemma-3-270M": "06c-qk-norm-model.ipynb"}
    for name, (model, _) in book_models.BOOK_MODELS.items():
        audit = book_models.stored(name)["rechecks"]["C9"]["verdict"]
        chapter = _stored_verdicts(chapters[model])[("C9", model)]["verdict"]
        assert chapter == audit == claims.RECHECKS[("C9", model)], (model, chapter, audit)


def test_c9_is_recorded_by_one_function(monkeypatch):
    """The audit's C9 recheck is hull.record_c9 (the chapters call it too): a change there moves the audit."""
    from attnref.analysis import hull
    from attnref.audit import rechecks
    from attnref.book import claims
    calls = []
    monkeypatch.setattr(hull, "record_c9", lambda ev, inside, winners, where: calls.append((inside, winners)))
    rechecks.record(claims.Evidence("C9", model="Gemma-3-270M"),
                    {"C9": {"tokens": 9, "interior_keys": 3, "interior_winners": 1, "heads": 2}})
    assert calls == [(3, 1)]
    for notebook in ("06-trained-model.ipynb", "06b-trained-decoder.ipynb"):
        import json
        cells = json.loads((Path(__file__).resolve().parent.parent / "notebooks" / notebook).read_text())["cells"]
        c9 = [c for c in cells if 'c9 = claims.Evidence("C9"' in "".join(c["source"])]
        assert len(c9) == 1 and "hull.record_c9(c9," in "".join(c9[0]["source"]), notebook


@pytest.mark.parametrize("inside, winners, verdict", [(0, 0, "premise fails here"), (4, 0, "holds"),
                                                       (4, 1, "not established"), (1, 3, "not established")])
def test_c9_rule_on_a_trained_model(inside, winners, verdict):
    """0 interior keys: premise fails here (C9 costs nothing), with the count; ≥ 1: holds if none wins.
    The old audit rule (≥ 1 interior key required) said *not established* for 0; the old chapter 6b
    rule voted 0 winners among 0 keys (holds)."""
    from attnref.analysis import hull
    from attnref.audit import rechecks
    from attnref.book import claims
    evidence = claims.Evidence("C9", model="SmolLM2-135M-Instruct")
    reason = hull.record_c9(evidence, inside, winners, where="a text")
    assert claims.decide(evidence.checks) == verdict
    assert (reason == hull.C9_NOTHING_INSIDE) == (inside == 0)
    audit = rechecks.verdicts("SmolLM2-135M-Instruct", {"C9": {"tokens": 5, "interior_keys": inside,
                                                                "interior_winners": winners, "heads": 1}})
    assert audit["C9"][0] == verdict
    if inside == 0:
        assert [c.bears_on for c in evidence.checks] == [claims.PREMISE] and evidence.checks[0].value == 0


@pytest.mark.parametrize("inside, winners", [(-1, 0), (0, 2), (1.5, 0), (True, 0), ("3", 0)])
def test_c9_refuses_counts_that_are_not_counts(inside, winners):
    from attnref.analysis import hull
    from attnref.book import claims
    with pytest.raises(ValueError, match="interior"):
        hull.record_c9(claims.Evidence("C9", model="Gemma-3-270M"), inside, winners, where="a text")
    with pytest.raises(ValueError, match="model"):
        hull.record_c9(claims.Evidence("C9"), 0, 0, where="a text")
