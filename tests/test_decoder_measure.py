"""The stored decoder measurements (data/smollm2-measurements.*) still match the code and the model.

``make measure`` ran SmolLM2 over the text set once; chapter 6 reads the stored sums. These tests
fail when the numbers and the code drift apart: the hash of the code that produced them, the
hash of the model file, and a re-measurement of two sentences and of layer 0's weights with the
current code (float32, one thread), which must reproduce the stored values.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnref.analysis import decoder_measure as dm
from attnref.book import provenance

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def stored():
    try:
        return dm.load(ROOT)
    except dm.StaleMeasurements as error:
        pytest.fail(str(error))


@pytest.fixture(scope="module")
def model():
    from attnref.models import smollm
    try:
        return smollm.load()
    except FileNotFoundError as error:
        pytest.skip(str(error))


def test_the_model_file_is_the_one_measured(stored):
    from attnref.models import smollm
    arrays, provenance = stored
    assert dm.file_hash(smollm.model_path()) == provenance["model_sha256"], (
        "the installed model file differs from the one measured: run `make measure`")


def test_two_sentences_measure_as_stored(stored, model):
    """The stored float32 values of two sentences lie within the float32 error this machine makes
    on them (measured against float64 here) times a factor for another machine's kernels."""
    arrays, _ = stored
    lengths = arrays["sentence_lengths"].tolist()
    starts = [0, *torch.tensor(lengths).cumsum(0).tolist()]
    ids = [arrays["token_ids"][starts[i]:starts[i + 1]].tolist() for i in (0, 1)]
    torch.set_num_threads(1)
    again = dm.measure_sentences(model, ids, gradients=2)
    exact = dm.measure_sentences(model.to(torch.float64), ids, gradients=2)
    for name, values in again.items():
        stored_values = arrays[name][:2, :2] if name.startswith("pair_") else arrays[name][:2]   # (s, s', …)
        distance, allowed = provenance.float32_drift(stored_values, values, exact[name])
        assert distance <= allowed, (
            f"{name}: the stored values lie {distance:.2g} (relative) from float64, more than "
            f"{provenance.FLOAT32_ERROR_FACTOR} × this machine's float32 error allows ({allowed:.2g}): run `make measure`")


def test_the_drift_tolerance_comes_from_this_machine_not_from_the_stored_values():
    reference = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
    here = reference * (1 + 1e-5)                        # this machine's float32 error: 1e-5
    assert provenance.float32_drift(reference * (1 + 2e-5), here, reference)[0] <= provenance.float32_drift(reference, here, reference)[1]
    wrong = reference * (1 + 1e-3)                       # a stored value off by 1e-3
    distance, allowed = provenance.float32_drift(wrong, here, reference)
    assert distance > allowed and allowed == pytest.approx(provenance.FLOAT32_ERROR_FACTOR * 1e-5, rel=1e-6)
    assert provenance.float32_drift(wrong, reference, reference)[1] == provenance.FLOAT32_ERROR_FACTOR * provenance.FLOAT32_ERROR_FLOOR


def test_layer_zero_weights_measure_as_stored(stored, model):
    arrays, _ = stored
    class FirstLayer:                       # the model with its first block only
        config = model.config
        layers = model.layers[:1]
    again = dm.family_spectra(FirstLayer)
    assert torch.allclose(again["family_sigma"][0], arrays["family_sigma"][0], rtol=1e-9, atol=0)
    assert torch.allclose(again["family_change"][0], arrays["family_change"][0], rtol=1e-9, atol=0)


def test_missing_or_stale_data_names_make_measure(tmp_path):
    with pytest.raises(dm.StaleMeasurements, match=r"missing: run `make measure`"):
        dm.load(tmp_path)
    import shutil
    for name in dm.SOURCES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / dm.DATA).parent.mkdir(parents=True)
    for suffix in (".npz", ".json"):
        shutil.copy((ROOT / dm.DATA).with_suffix(suffix), (tmp_path / dm.DATA).with_suffix(suffix))
    dm.load(tmp_path, sources=tmp_path)                       # same code: loads
    (tmp_path / dm.SOURCES[0]).write_text((ROOT / dm.SOURCES[0]).read_text() + "\n# changed\n")
    with pytest.raises(dm.StaleMeasurements, match=r"measured with other code .* run `make measure`"):
        dm.load(tmp_path, sources=tmp_path)


def test_the_requantised_model_measures_as_stored(stored, model):
    """The quantisation sensitivity: re-rounding draw 0 (same seed, same order of draws) gives the
    stored spectra of block 1 (float64 SVD of float32 weights, 1e-9) and, for the first sentence,
    the stored sums within 32× this machine's float32 error (as the two-sentence test)."""
    from attnref.models import smollm
    arrays, record = stored
    steps = dm.block_steps(smollm.model_path(), len(model.layers))
    noisy = dm.requantised(model, steps, torch.Generator().manual_seed(record["requant"]["seed"]))

    class FirstLayer:
        config = model.config
        layers = noisy.layers[:1]
    sigma = dm.family_spectra(FirstLayer, offsets=(0,))["family_sigma"][0, :, 0]
    assert torch.allclose(sigma, arrays["requant_sigma"][0, 0], rtol=1e-9, atol=0)
    ids = torch.tensor(arrays["token_ids"][:int(arrays["sentence_lengths"][0])].tolist())
    torch.set_num_threads(1)
    with torch.no_grad():
        again = dm._sums_for_sentence(noisy, ids, attention_only=False)
        exact = dm._sums_for_sentence(noisy.to(torch.float64), ids, attention_only=False)
    for name in dm.REQUANT_SUMS:
        distance, allowed = provenance.float32_drift(arrays[f"requant_{name}"][0, :1], again[name][None],
                                                     exact[name][None])
        assert distance <= allowed, f"requant_{name}: {distance:.2g} from float64 > {allowed:.2g}: run `make measure`"


def test_block_zero_hull_measures_as_stored(stored, model):
    """C9's hull arrays of the long text, block 0 (the float32 activations within the float32 error
    this machine makes on them, as above), and the random-key baseline (float64, seeded: 1e-9)."""
    arrays, record = stored

    def first_block(m):
        class FirstLayer:
            config = m.config
            layers = m.layers[:1]
            embedding = m.embedding
        return FirstLayer

    ids = arrays["token_ids"][:record["long_text_tokens"]].tolist()
    torch.set_num_threads(1)
    again = dm.long_text_hull(first_block(model), ids, seed=record["hull"]["seed"])
    exact = dm.long_text_hull(first_block(model.to(torch.float64)), ids, seed=record["hull"]["seed"])
    for name in ("hull_distance", "hull_key_scale", "hull_top_gap", "hull_centroid_gap"):
        distance, allowed = provenance.float32_drift(arrays[name][:1], again[name], exact[name])
        assert distance <= allowed, f"{name}: {distance:.2g} from float64 > {allowed:.2g}: run `make measure`"
    assert (arrays["hull_centroid_distance"][0] <= 1e-9 * arrays["hull_key_scale"][0]).all()
    assert torch.allclose(again["hull_random_distance"], arrays["hull_random_distance"], rtol=1e-9, atol=0)


def test_two_paraphrase_pairs_measure_as_stored(stored, model):
    """A3: the mean cosines of the first two pairs' sentences (raw and with the stored common
    direction removed) re-measured with the current code, within this machine's float32 error."""
    arrays, _ = stored
    lengths = arrays["semantic_lengths"].tolist()
    starts = [0, *torch.tensor(lengths).cumsum(0).tolist()]
    sentences = [arrays["semantic_token_ids"][starts[i]:starts[i + 1]].tolist() for i in range(len(lengths))]
    pairs = len(lengths) // 2
    first, second = sentences[:2], sentences[pairs:pairs + 2]
    torch.set_num_threads(1)
    again = dm.semantic_measure(model, first, second, arrays["semantic_mean"], arrays["semantic_directions"])
    exact = dm.semantic_measure(model.to(torch.float64), first, second, arrays["semantic_mean"],
                                arrays["semantic_directions"])
    for name in ("semantic_raw", "semantic_removed"):
        distance, allowed = provenance.float32_drift(arrays[name][:2, :2], again[name], exact[name])
        assert distance <= allowed, f"{name}: the stored values drifted ({distance:.2g} > {allowed:.2g}): run `make measure`"
