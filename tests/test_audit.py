"""`attnref audit`: the rechecks on a checkpoint it was not written for, the numbers against
independent computations, and every bad input refused in one line with exit status 2 and the
report folder left as it was."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnref.audit import AuditError, audit, read_texts
from attnref.audit.cli import main
from attnref.audit.families import detect

minilm = pytest.importorskip("attnref.models.minilm")

TEXTS = ["The cat slept on the warm windowsill all afternoon.",
         "Interest rates rose again in March, and mortgage applications fell.",
         "Add the onions only when the oil is hot enough to make them sizzle."]


@pytest.fixture(scope="module")
def model_dir() -> Path:
    try:
        return minilm.model_dir()
    except (ModuleNotFoundError, FileNotFoundError) as error:
        pytest.skip(f"all-MiniLM-L6-v2 is not installed: {error}")


@pytest.fixture(scope="module")
def report(model_dir, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("audit") / "report"
    result = audit(model_dir, TEXTS, out)
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]
    return {"result": result, "out": out}


def test_the_report_files_hold_the_result(report):
    stored = json.loads((report["out"] / "report.json").read_text())
    assert stored["rechecks"].keys() == report["result"]["rechecks"].keys()
    assert stored["model"]["family"] == "bert" and len(stored["model"]["sha256"]["model.safetensors"]) == 64
    page = (report["out"] / "report.html").read_text()
    assert "<svg" in page and "http://" not in page and "https://" not in page   # self-contained
    for cid, entry in stored["rechecks"].items():
        assert f"id='{cid.lower()}'" in page and entry["verdict"] in page


def test_the_numbers_equal_a_direct_computation(report, model_dir):
    """C3's per-head variance ratio, A1's per-block mass on the first token and H2's rank, each
    recomputed here from the encoder's own outputs with loops over rows (not the audit's code)."""
    m = report["result"]["measurements"]
    model = minilm.load(model_dir, dtype=torch.float64)
    tokenizer = minilm.load_tokenizer(model_dir)
    L, h, d_k = model.config.layers, model.config.h, model.config.d_k
    variance = torch.zeros(L, h, dtype=torch.float64)
    first, rows = torch.zeros(L, dtype=torch.float64), 0
    for text in TEXTS:
        ids = torch.tensor([tokenizer.encode(text).ids])
        output = minilm.encode(model, ids)
        n = ids.shape[1]
        rows += n
        for l, layer in enumerate(model.layers):
            x = output.hidden_states[l][0]
            for head in range(h):
                q = x @ layer.attention.w_q[head] + layer.attention.b_q[head]
                k = x @ layer.attention.w_k[head] + layer.attention.b_k[head]
                for i in range(n):
                    variance[l, head] += (k @ q[i]).var(unbiased=False)
            first[l] += output.attentions[l][0][:, :, 0].sum() / h
    ratio = variance / (rows * d_k)
    assert torch.allclose(torch.tensor(m["C3"]["per_head"], dtype=torch.float64), ratio, rtol=1e-4), \
        "the audit's Var_j(q·k)/d_k differs from a loop over rows (float32 model run: rtol 1e-4)"
    assert torch.allclose(torch.tensor(m["A1"]["share_per_block"], dtype=torch.float64), first / rows, rtol=1e-4)
    assert m["H2"]["certified_heads"] == m["H2"]["heads"] == L * h
    assert m["H2"]["d_k"] == d_k


def test_a_copied_model_directory_gives_the_same_numbers(report, model_dir, tmp_path):
    copy = tmp_path / "my-encoder"
    shutil.copytree(model_dir, copy)
    again = audit(copy, TEXTS, tmp_path / "out")
    assert again["measurements"] == report["result"]["measurements"]
    assert {k: v["verdict"] for k, v in again["rechecks"].items()} == \
           {k: v["verdict"] for k, v in report["result"]["rechecks"].items()}
    assert again["model"]["name"] == "my-encoder"


def test_verdicts_follow_the_engine(report):
    from attnref.book import claims
    for cid, entry in report["result"]["rechecks"].items():
        checks = [claims.Check(**{k: v for k, v in c.items() if k in claims.Check.__dataclass_fields__})
                  for c in entry["checks"]]
        assert claims.decide(checks) == entry["verdict"], cid


def _cli(args, capsys) -> tuple[int, str]:
    code = main([str(a) for a in args] + ["--quiet"])
    return code, capsys.readouterr().err


def _untouched(out: Path) -> None:
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"], "the report folder was written into"
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}-")], "a staging folder was left"


@pytest.fixture
def out(tmp_path) -> Path:
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "keep.txt").write_text("earlier report")
    return folder


def _model_copy(model_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "model-copy"
    shutil.copytree(model_dir, copy)
    return copy


@pytest.mark.parametrize("case", ["missing", "no-config", "bad-json", "unsupported", "not-a-checkpoint"])
def test_bad_checkpoints_are_refused_in_one_line(case, tmp_path, out, capsys):
    path = tmp_path / "ckpt"
    if case != "missing":
        path.mkdir()
    if case == "bad-json":
        (path / "config.json").write_text("{not json")
    if case == "unsupported":
        (path / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    if case == "not-a-checkpoint":
        path = tmp_path / "weights.bin"
        path.write_bytes(b"\0" * 16)
    code, err = _cli([path, "--out", out], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("attnref audit: "), err
    expected = {"missing": "no such file", "no-config": "config.json", "bad-json": "not valid JSON",
                "unsupported": "unsupported architecture gpt2", "not-a-checkpoint": "not a checkpoint"}[case]
    assert expected in err
    if case == "unsupported":
        assert "bert" in err and "llama" in err and "gemma3" in err        # what is supported
    _untouched(out)


def test_a_truncated_weight_file_is_refused(model_dir, tmp_path, out, capsys):
    copy = _model_copy(model_dir, tmp_path)
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 3])
    code, err = _cli([copy, "--texts", _texts(tmp_path, TEXTS), "--out", out], capsys)
    assert code == 2 and err.count("\n") == 1 and "corrupt" in err, err
    _untouched(out)


def _texts(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_empty_text_file_is_refused(model_dir, tmp_path, out, capsys):
    code, err = _cli([model_dir, "--texts", _texts(tmp_path, ["", "   "]), "--out", out], capsys)
    assert code == 2 and err.count("\n") == 1 and "holds no text" in err, err
    _untouched(out)


def test_a_text_longer_than_the_context_is_refused(model_dir, tmp_path, out, capsys):
    long = " ".join(["word"] * 700)
    code, err = _cli([model_dir, "--texts", _texts(tmp_path, [TEXTS[0], long]), "--out", out], capsys)
    assert code == 2 and err.count("\n") == 1 and "text 2 has" in err and "context of 512" in err, err
    _untouched(out)


def test_the_default_texts_are_the_books():
    from attnref.analysis.texts import SENTENCES
    assert read_texts(None) == list(SENTENCES)


def test_a_gguf_decoder_is_recognised_without_loading_it():
    smollm = pytest.importorskip("attnref.models.smollm")
    try:
        path = smollm.model_path()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    family, config = detect(path)
    assert family.name == "llama" and config["general.architecture"] == "llama"


def test_the_module_runs_as_a_command(tmp_path):
    """``python -m attnref.audit`` answers a bad path with exit status 2 and one line."""
    done = subprocess.run([sys.executable, "-m", "attnref.audit", str(tmp_path / "nothing"), "--quiet"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.strip().startswith("attnref audit:") and done.stderr.count("\n") == 1


def test_the_stored_report_on_the_books_page_is_consistent(model_dir):
    """data/audit/minilm (shown on the "Check your own model" page): its Markdown is what its JSON
    gives, its verdicts are the engine's, and it was made from the installed weights."""
    import hashlib

    from attnref.audit import report as report_module
    folder = Path(__file__).resolve().parents[1] / "data" / "audit" / "minilm"
    stored = json.loads((folder / "report.json").read_text())
    assert (folder / "report.md").read_text() == report_module.markdown(stored)
    digest = hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()
    assert stored["model"]["sha256"]["model.safetensors"] == digest
    from attnref.analysis.texts import SENTENCES
    assert stored["texts"]["sha256"] == hashlib.sha256("\n".join(SENTENCES).encode()).hexdigest()
    test_verdicts_follow_the_engine({"result": stored})
