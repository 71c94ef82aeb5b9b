r"""``attnref audit``: the book's trained-model rechecks on any checkpoint.

::

    python -m attnref.audit PATH [--texts FILE] [--out DIR]      # or: attnref-audit PATH …

``PATH`` is a Hugging Face model directory (``config.json`` + ``model.safetensors``) or a GGUF
file. The family is recognised from its configuration (:mod:`attnref.audit.families`: BERT-style
encoders, Llama-style decoders, Gemma 3); the rechecks (:mod:`attnref.audit.rechecks`) run on the
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


def audit(path: str | Path, texts: list[str] | None = None, out: str | Path = "audit-report",
          progress: bool = False) -> dict:
    """Run every recheck on the checkpoint at ``path`` over ``texts``; write the report into ``out``
    (atomically) and return it. Raises :class:`AuditError` for a problem with the input."""
    import torch

    import attnref
    from attnref.analysis.decoder_measure import file_hash
    from attnref.audit import rechecks, report as report_module

    started = time.perf_counter()
    path, out = Path(path), Path(out)
    if out.exists() and not out.is_dir():
        raise AuditError(f"--out {out}: exists and is not a directory")
    family, config = detect(path)
    texts = read_texts(None) if texts is None else list(texts)
    if not texts:
        raise AuditError("no text to read: the text list is empty")
    model = family.load(path, config)
    ids = rechecks.check_texts(model, texts)
    joined = model.tokenize(" ".join(texts))[: min(rechecks.HULL_TOKENS, model.context)]
    if model.prepare is not None:
        model.prepare(ids + [joined])
    bar = None
    if progress:
        try:
            from tqdm import tqdm
            steps = len(ids) + (model.layers if model.attention_branch is not None else 0)
            bar = tqdm(total=steps, desc=f"audit {model.name}", unit="step")
        except ImportError:
            bar = None
    try:
        with torch.no_grad():          # attnref's input checks stay on: a NaN in the weights is refused
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
    result = {
        "model": {"name": model.name, "family": family.name, "path": path.name,
                  "sha256": {f.name: file_hash(f) for f in model.files}, **model.details},
        "texts": {"count": len(texts), "tokens": sum(len(i) for i in ids),
                  "sha256": hashlib.sha256("\n".join(texts).encode()).hexdigest()},
        "rechecks": {cid: {"claim": claims.claim(cid).statement, "verdict": verdict,
                           "checks": [claims._as_dict(c) for c in checks]}
                     for cid, (verdict, checks) in decided.items()},
        "measurements": rechecks.plain(measured),
        "thresholds": rechecks.THRESHOLDS,
        "software": {"attnref": getattr(attnref, "__version__", "0.1.0"), "torch": torch.__version__,
                     "python": platform.python_version()},
        "seconds": round(time.perf_counter() - started, 1),
    }
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
