"""Chapter 3 (M1–M7): every claim's checks catch a plausible bug.

Each test runs the notebook's own code cells for one claim section in-process (set-up cell, then
the section's cells; figures off, ``glue`` a no-op, the default seed) — once as written, where
the verdict is the expected one, and once with one plausible bug injected, where the named
check must fail. The bug is injected either into ``attnref`` (a patched function) or into the
notebook's source (an exact piece of text replaced; if that text is gone, the test says which).

| claim | injected bug | check that catches it |
| --- | --- | --- |
| M1 | attention returns its weights detached from the input | Jacobian parity with torch |
| M2 | the sliding window applies its offsets in reverse | parity with ``Conv1d(k=3)`` |
| M3 | the parameter formula forgets the biases | torch's count − N_attention |
| M4 | a causal mask left switched on | SA(PX) = P SA(X) |
| M5 | harmonic frames scaled by √(1/n) instead of √(2/n) | ΦᵀΦ = I for the harmonic frames |
| M6 | linear attention divides by √d_k as SDPA does | linear_attention vs the bra-ket loop |
| M7 | the softmax taken over the queries (dim −2) | the exact 2-D hull test |

For M1–M5 and M7 the bug also moves the verdict (to *not established*). M6 is refuted by
several independent counterexamples (four of them symbolic), so one broken numerical check
leaves it *does not hold*; the test shows that check fails and that the symbolic
counterexamples still stand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import attnref
import attnref.sequence_layers
from attnref.attention import AttentionResult
from attnref.book import claims

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "03-attention-vs-linear.ipynb"


def sections() -> dict[str, list[str]]:
    """The code cells of the notebook: ``"setup"`` (before the first claim) and one list per claim ID."""
    found: dict[str, list[str]] = {"setup": []}
    current = "setup"
    for cell in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and source.startswith("(claim-"):
            current = source[len("(claim-"):source.index(")=")].upper()
            found[current] = []
        elif cell["cell_type"] == "code":
            found[current].append(source)
    return found


def replace(source: str, original: str, replacement: str) -> str:
    count = source.count(original)
    assert count == 1, (f"mutation site {original!r} found {count} times in the section's code of "
                        f"{NOTEBOOK.name}: update tests/test_ch3_checks.py to the current wording")
    return source.replace(original, replacement)


def run_claim(claim_id: str, monkeypatch, mutation: tuple[str, str] | None = None) -> claims.Evidence:
    """Execute the set-up cell and the claim's cells; return the claim's recorded evidence."""
    monkeypatch.setenv("ATTNREF_FIGURES", "off")
    monkeypatch.delenv("ATTNREF_SEED", raising=False)
    cells = sections()
    code = "\n".join(cells[claim_id])
    if mutation is not None:
        code = replace(code, *mutation)
    setup = "\n".join(cells["setup"]).replace("from myst_nb import glue", "glue = lambda *args, **kwargs: None")
    namespace: dict = {}
    exec(compile(setup, "<setup>", "exec"), namespace)
    exec(compile(code, f"<{claim_id}>", "exec"), namespace)
    import matplotlib.pyplot as plt
    plt.close("all")
    return namespace[claim_id.lower()]


def failing(evidence: claims.Evidence) -> list[str]:
    return [c.name for c in evidence.checks if not c.passed]


@pytest.mark.parametrize("claim_id", ["M1", "M2", "M3", "M4", "M5", "M6", "M7"])
def test_the_section_as_written_gives_the_expected_verdict(claim_id, monkeypatch):
    evidence = run_claim(claim_id, monkeypatch)
    assert failing(evidence) == [], failing(evidence)
    assert claims.decide(evidence.checks) == claims.expected_verdict(claim_id)


def assert_caught(evidence: claims.Evidence, check: str, verdict: str) -> None:
    assert check in failing(evidence), f"{check!r} did not fail; failing: {failing(evidence)}"
    assert claims.decide(evidence.checks) == verdict


def test_m1_detached_weights_are_caught(monkeypatch):
    original = attnref.multi_head_attention

    def detached(*args, **kwargs):
        result = original(*args, **kwargs)
        return AttentionResult(result.output, result.weights.detach())   # weights cut off from X

    monkeypatch.setattr(attnref, "multi_head_attention", detached)
    evidence = run_claim("M1", monkeypatch)
    assert_caught(evidence, "max |∂α/∂X of attnref − of torch's MultiheadAttention|", claims.NOT_ESTABLISHED)
    assert "smallest ‖∂α_i/∂X‖ over heads and queries" in failing(evidence)


def test_m2_reversed_window_is_caught(monkeypatch):
    original = attnref.sequence_layers.sliding_window_linear
    monkeypatch.setattr(attnref.sequence_layers, "sliding_window_linear",
                        lambda x, weight, bias=None: original(x, weight.flip(0), bias))
    evidence = run_claim("M2", monkeypatch)
    assert_caught(evidence, "max |sliding window vs Conv1d(k=3)|", claims.NOT_ESTABLISHED)


def test_m3_count_without_biases_is_caught(monkeypatch):
    evidence = run_claim("M3", monkeypatch, mutation=(
        "h * d_v * d + h * (2 * d_k + d_v) + d\n", "h * d_v * d\n"))
    assert_caught(evidence, "parameters of torch's MultiheadAttention (d = 8, h = 2) − N_attention",
                  claims.NOT_ESTABLISHED)


def test_m4_causal_mask_left_on_is_caught(monkeypatch):
    original = attnref.multi_head_attention
    monkeypatch.setattr(attnref, "multi_head_attention",
                        lambda *args, **kwargs: original(*args, **{**kwargs, "causal": True}))
    evidence = run_claim("M4", monkeypatch)
    assert_caught(evidence, "max |SA(PX) − P SA(X), attnref|", claims.NOT_ESTABLISHED)


def test_m5_misnormalised_frame_is_caught(monkeypatch):
    evidence = run_claim("M5", monkeypatch, mutation=("(2 / count) ** 0.5", "(1 / count) ** 0.5"))
    assert_caught(evidence, "harmonic frames, n = 3 … 12 in ℝ²: max |ΦᵀΦ − I|", claims.NOT_ESTABLISHED)


def test_m6_scaled_linear_attention_is_caught(monkeypatch):
    original = attnref.linear_attention

    def scaled(query, key, value, **kwargs):
        result = original(query, key, value, **kwargs)
        scale = query.shape[-1] ** -0.5                                    # SDPA's 1/√d_k, copied over
        return AttentionResult(result.output * scale, result.weights * scale)

    monkeypatch.setattr(attnref, "linear_attention", scaled)
    evidence = run_claim("M6", monkeypatch)
    assert "max |linear_attention − the bra-ket sum as a loop|" in failing(evidence), failing(evidence)
    assert "(b) ⟨k_i|q_m⟩ = δ_im: max |φ′_m − x_m W_V|" in failing(evidence), failing(evidence)
    symbolic = [c for c in evidence.checks if c.kind == claims.SYMBOLIC]
    assert symbolic and all(c.passed and c.bears_on == claims.COUNTEREXAMPLE for c in symbolic)
    # the symbolic counterexamples still stand, but broken counterexample checks move the verdict
    assert claims.decide(evidence.checks) == claims.NOT_ESTABLISHED


def test_m7_softmax_over_the_wrong_axis_is_caught(monkeypatch):
    def wrong_axis(query, key, value, **kwargs):
        scores = query @ key.transpose(-2, -1) / query.shape[-1] ** 0.5
        weights = scores.softmax(dim=-2)                                   # over the queries
        return AttentionResult(weights @ value, weights)

    monkeypatch.setattr(attnref, "scaled_dot_product_attention", wrong_axis)
    evidence = run_claim("M7", monkeypatch)
    assert_caught(evidence, "largest signed distance of an output outside the 2-D hull (exact test)",
                  claims.NOT_ESTABLISHED)
