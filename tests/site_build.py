"""One private build of the book per test run, shared by the tests that need a built site
(tests/test_browser.py, tests/test_browser_claims.py, tests/test_pdf.py).

``$ATTENTION_CLAIMS_SITE`` names an existing build instead. Under pytest-xdist the workers of one
run share ``PYTEST_XDIST_TESTRUNUID``: the first worker to ask builds into a folder named after
it (under a file lock) and the others wait for that build instead of making their own (each
build costs 30-60 s of a core). Without xdist the build goes to pytest's own temporary folder.
Folders of earlier runs older than a day are removed.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK_FLAGS = ("-n", "-W", "--keep-going")
_PREFIX = "attention-claims-site-"


def _build(out: Path) -> Path:
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    result = subprocess.run([str(jupyter_book), "build", str(ROOT), *BOOK_FLAGS, "--path-output", str(out)],
                            cwd=ROOT, capture_output=True, text=True)
    log = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr)
    problems = [line for line in log.splitlines() if "WARNING" in line or "ERROR" in line]
    assert result.returncode == 0, ("the book does not build with -n -W --keep-going:\n"
                                    + "\n".join(problems[:40] or log.splitlines()[-60:]))
    return out / "_build" / "html"


def _remove_old_builds(root: Path, keep: Path) -> None:
    for old in root.glob(_PREFIX + "*"):
        if old != keep and time.time() - old.stat().st_mtime > 86400:
            shutil.rmtree(old, ignore_errors=True)


def built_site(tmp_path_factory) -> Path:
    """The built HTML folder (``…/_build/html``) of this test run."""
    if os.environ.get("ATTENTION_CLAIMS_SITE"):
        html = Path(os.environ["ATTENTION_CLAIMS_SITE"]).resolve()
        assert (html / "index.html").exists(), f"ATTENTION_CLAIMS_SITE={html} holds no built site"
        return html
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        return _build(tmp_path_factory.mktemp("book"))
    root = Path(tempfile.gettempdir())
    shared = root / (_PREFIX + re.sub(r"[^0-9A-Za-z]", "", run))
    shared.mkdir(exist_ok=True)
    _remove_old_builds(root, shared)
    with open(shared / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # one worker builds, the others wait for it
        html = shared / "_build" / "html"
        if not (shared / ".built").exists():
            shutil.rmtree(shared / "_build", ignore_errors=True)
            _build(shared)
            (shared / ".built").write_text("ok\n")
        return html
