"""The audit of the book's three models, stored for the chapters: ``data/audit/<name>/report.{json,md,html}``.

::

    python -m attnref.audit.book_models [minilm] [smollm2] [gemma3]     # make audit-models

Each report is ``attnref audit`` on the installed checkpoint with the default texts (the book's text
set), written by :func:`attnref.audit.audit` itself: chapter 6c reads its rechecks from them
(:func:`stored`, then :func:`attnref.audit.rechecks.from_plain` and
:func:`attnref.audit.rechecks.record`), so the page and the command cannot disagree, and
``tests/test_audit.py`` re-audits MiniLM and compares with its stored report (drift).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

#: name -> (registry model name, function returning the installed checkpoint's path)
BOOK_MODELS = {
    "minilm": ("all-MiniLM-L6-v2", lambda: __import__("attnref.models.minilm", fromlist=["x"]).model_dir()),
    "smollm2": ("SmolLM2-135M-Instruct", lambda: __import__("attnref.models.smollm", fromlist=["x"]).model_path()),
    "gemma3": ("Gemma-3-270M", lambda: __import__("attnref.models.gemma3", fromlist=["x"]).model_path()),
}
#: Where the stored reports live, relative to the repository.
FOLDER = Path("data") / "audit"


def root() -> Path:
    """The repository (the folder that holds ``data/``)."""
    from attnref.analysis.decoder_measure import data_root
    return data_root()


def stored(name: str, base: Path | None = None) -> dict:
    """The stored report of a book model (``minilm``, ``smollm2``, ``gemma3``)."""
    if name not in BOOK_MODELS:
        raise ValueError(f"unknown book model {name!r}; known: {', '.join(BOOK_MODELS)}")
    path = (root() if base is None else base) / FOLDER / name / "report.json"
    if not path.is_file():
        raise FileNotFoundError(f"{FOLDER / name / 'report.json'} is missing: run `make audit-models`")
    return json.loads(path.read_text())


def main(argv: list[str] | None = None) -> int:
    from attnref.audit import audit
    names = list(argv if argv is not None else sys.argv[1:]) or list(BOOK_MODELS)
    unknown = [n for n in names if n not in BOOK_MODELS]
    if unknown:
        print(f"unknown book model(s) {', '.join(unknown)}; known: {', '.join(BOOK_MODELS)}", file=sys.stderr)
        return 2
    for name in names:
        started = time.perf_counter()
        report = audit(BOOK_MODELS[name][1](), None, root() / FOLDER / name, progress=False)
        verdicts = ", ".join(f"{cid} {e['verdict']}" for cid, e in report["rechecks"].items())
        print(f"{name}: {time.perf_counter() - started:.0f} s: {verdicts}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
