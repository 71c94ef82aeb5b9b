r"""``attnref audit``: the book's trained-model rechecks on any checkpoint.

::

    python -m attnref.audit PATH [--texts FILE] [--out DIR] [--dtype float32] [--device cpu]   # or: attnref-audit PATH …

``PATH`` is a Hugging Face model directory (``config.json`` + ``*.safetensors``, sharded with
``model.safetensors.index.json`` or not; float32, float16 or bfloat16 as stored) or a GGUF file.
The family is recognised from its configuration (:mod:`attnref.audit.families`: BERT, Llama,
Mistral, Qwen2, Qwen3, Gemma 3, GPT-2; Llama and Gemma 3 as GGUF files too); a Hugging Face
decoder is read one block at a time (:mod:`attnref.audit.families._hf`). ``--dtype`` is the
compute precision (default float32; the weights are converted block by block), ``--device`` where
the blocks run (``cuda`` if torch sees a GPU); both are recorded in the report. The rechecks (:mod:`attnref.audit.rechecks`) run on the
texts (one per line; default: the book's text set, :data:`attnref.analysis.texts.SENTENCES`) and
``DIR`` (default ``audit-report``) receives ``report.json`` and ``report.html``. A problem with the
input (a missing or corrupt file, an unsupported architecture, an empty text file, a text longer
than the model's context) is one line on standard error and exit status 2; ``DIR`` is then left
as it was (the report is written beside it and moved in only when complete).
"""

from __future__ import annotations

import hashlib
import platform
import shutil
import tempfile
import time
from pathlib import Path

from attnref.audit.families import AuditError, detect

__all__ = ["AuditError", "audit", "read_texts"]


def read_texts(path: Path | None) -> list[str]:
    """The texts of ``path`` (one per line, blank lines skipped), or the book's text set."""
    if path is None:
        from attnref.analysis.texts import SENTENCES
        return list(SENTENCES)
    path = Path(path)
    if not path.is_file():
        raise AuditError(f"{path}: no such text file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise AuditError(f"{path.name}: not a UTF-8 text file") from None
    texts = [line.strip() for line in lines if line.strip()]
    if not texts:
        raise AuditError(f"{path.name} holds no text (one text per line; blank lines are skipped)")
    return texts


#: ``--dtype`` names -> torch dtypes (the compute precision).
DTYPES = ("float32", "float64", "bfloat16", "float16")
#: The version of report.json's layout (attnref/audit/report.schema.json describes it).
REPORT_VERSION = "2"


def compute_options(dtype: str | None, device: str | None):
    """``--dtype`` and ``--device`` as torch objects, or an :class:`AuditError` naming the argument."""
    import torch
    if dtype is not None and dtype not in DTYPES:
        raise AuditError(f"--dtype {dtype}: not a compute precision; choose one of {', '.join(DTYPES)}")
    torch_dtype = getattr(torch, dtype or "float32")
    name = str(device or "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise AuditError(f"--device {name}: torch sees no CUDA device here (torch {torch.__version__}); use --device cpu")
    elif name != "cpu":
        raise AuditError(f"--device {name}: not a device the audit runs on; choose cpu or cuda (cuda:N)")
    try:
        torch_device = torch.device(name)
    except RuntimeError as error:
        raise AuditError(f"--device {name}: {error}") from None
    return torch_dtype, torch_device


def audit(path: str | Path, texts: list[str] | None = None, out: str | Path = "audit-report",
          progress: bool = False, dtype: str | None = None, device: str | None = None) -> dict:
    """Run every recheck on the checkpoint at ``path`` over ``texts``; write the report into ``out``
    (atomically) and return it. ``dtype`` (one of :data:`DTYPES`, default float32) is the compute
    precision of the model's forward pass, ``device`` where it runs (``cpu``, ``cuda``); the
    rechecks' statistics are computed in float64 on the CPU from what the pass returns. Raises
    :class:`AuditError` for a problem with the input."""
    import torch

    import attnref
    from attnref.analysis.decoder_measure import file_hash
    from attnref.audit import rechecks, report as report_module

    started = time.perf_counter()
    path, out = Path(path), Path(out)
    if out.exists() and not out.is_dir():
        raise AuditError(f"--out {out}: exists and is not a directory")
    torch_dtype, torch_device = compute_options(dtype, device)
    family, config = detect(path)
    texts = read_texts(None) if texts is None else list(texts)
    if not texts:
        raise AuditError("no text to read: the text list is empty")
    model = family.load(path, config, dtype=torch_dtype, device=torch_device)
    ids = rechecks.check_texts(model, texts)
    joined = model.tokenize(" ".join(texts))[: min(rechecks.HULL_TOKENS, model.context)]
    layerwise = getattr(model, "layerwise", None)
    bar = None
    if progress:
        try:
            from tqdm import tqdm
            steps = (len(ids) + (model.layers if model.attention_branch is not None else 0)
                     + (model.layers if layerwise is not None else 0))
            bar = tqdm(total=steps, desc=f"audit {model.name}", unit="step")
        except ImportError:
            bar = None
    if layerwise is not None and bar is not None:
        layerwise.progress = bar.update                  # one step per block of the pass over the texts
    try:
        with torch.no_grad():          # attnref's input checks stay on: a NaN in the weights is refused
            if model.prepare is not None:
                model.prepare(ids + [joined])
            sums = rechecks.collect(model, ids, progress=None if bar is None else bar.update)
            paths = None if model.attention_branch is None else \
                rechecks.attention_paths(model, sums.first, progress=None if bar is None else bar.update)
            measured = rechecks.measure(model, sums, joined if len(joined) >= 2 else None, paths)
    except ValueError as error:
        raise AuditError(f"{path.name}: the model could not be run on the texts "
                         f"({str(error).splitlines()[0] if str(error) else error.__class__.__name__})") from None
    if bar is not None:
        bar.close()
    decided = rechecks.verdicts(model.name, measured)
    from attnref.book import claims
    hashes = {f.name: file_hash(f) for f in model.files}
    precision = str(torch_dtype).replace("torch.", "")
    half = torch_dtype in (torch.bfloat16, torch.float16)
    result = {
        "schema": REPORT_VERSION,
        "model": {"name": model.name, "family": family.name, "path": path.name,
                  "sha256": hashes, **model.details},
        "checkpoint": {"sha256": _checkpoint_hash(hashes), "files": len(hashes)},
        "compute": {"dtype": precision, "device": str(torch_device), "layerwise": layerwise is not None,
                    "note": (f"the forward pass ran in {precision}: every number below was computed from "
                             f"{precision} activations (statistics in float64)") if half else None},
        "texts": {"count": len(texts), "tokens": sum(len(i) for i in ids),
                  "sha256": hashlib.sha256("\n".join(texts).encode()).hexdigest()},
        "rechecks": {cid: {"claim": claims.claim(cid).statement, "verdict": verdict,
                           "checks": [_precision_noted(claims._as_dict(c), precision if half else None)
                                      for c in checks]}
                     for cid, (verdict, checks) in decided.items()},
        "measurements": rechecks.plain(measured),
        "thresholds": rechecks.THRESHOLDS,
        "software": {"attnref": getattr(attnref, "__version__", "0.1.0"), "torch": torch.__version__,
                     "python": platform.python_version()},
        "seconds": round(time.perf_counter() - started, 1),
    }
    result["numbers"] = report_module.headline_numbers(result["measurements"])
    result["book_models"] = report_module.book_comparison()
    if layerwise is not None and layerwise.seconds_per_block:
        per_block = sorted(layerwise.seconds_per_block)
        result["timing"] = {"blocks": len(per_block), "median_seconds_per_block": round(per_block[len(per_block) // 2], 4)}
    return _write(out, result, decided, report_module)


def _checkpoint_hash(hashes: dict[str, str]) -> str:
    """One sha256 for the whole checkpoint: of the sorted lines ``name sha256`` of its files."""
    return hashlib.sha256("".join(f"{name} {h}\n" for name, h in sorted(hashes.items())).encode()).hexdigest()


def _precision_noted(check: dict, precision: str | None) -> dict:
    """A check computed from half-precision activations says so beside its bound."""
    if precision is not None:
        check = {**check, "held_to": f"{check['held_to']} (computed in {precision})", "precision": precision}
    return check


def _write(out: Path, result: dict, decided, report_module) -> dict:
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=parent))
    try:
        report_module.write(staging, result, decided)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}-old-", dir=parent))
            out.rename(old / out.name)
            staging.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return result
