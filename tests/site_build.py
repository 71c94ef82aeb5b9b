"""One private build of the book per test run, shared by the tests that need a built site
(tests/test_browser.py, tests/test_browser_claims.py, tests/test_pdf.py), and the local server
they read it through (:func:`serve`).

``$ATTENTION_CLAIMS_SITE`` names an existing build instead. Under pytest-xdist the workers of one
run share ``PYTEST_XDIST_TESTRUNUID``: the first worker to ask builds into a folder named after
it (under a file lock) and the others wait for that build instead of making their own (each
build costs 30-60 s of a core). Without xdist the build goes to pytest's own temporary folder.
Folders of earlier runs (about 50 MB each) are removed once they are three hours old.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import gzip
import http.server
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK_FLAGS = ("-n", "-W", "--keep-going")
_PREFIX = "attention-claims-site-"
#: Served gzip-compressed to a client that accepts it, as GitHub Pages serves them.
COMPRESSED = {".html", ".js", ".css", ".svg", ".json", ".txt", ".xml", ".ipynb", ".md", ".inv"}


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
        if old != keep and time.time() - old.stat().st_mtime > 3 * 3600:   # no test run lasts 3 hours
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


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive: one connection for a page's many assets

    def log_message(self, *args) -> None:
        pass

    def send_head(self):
        """Text files go out gzip-compressed to a client that accepts it, as GitHub Pages sends
        them; everything else (images, fonts, directories) as the standard handler sends it."""
        path = Path(self.translate_path(self.path))
        if (path.suffix not in COMPRESSED or not path.is_file()
                or "gzip" not in self.headers.get("Accept-Encoding", "")):
            return super().send_head()
        body = _gzipped(str(path), path.stat().st_mtime_ns)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)

    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok and not self.path.startswith("/"):   # proxy form (Chromium's proxy is this server)
            self.server.proxied.append(f"{self.command} {self.path}")
        return ok


@functools.lru_cache(maxsize=512)
def _gzipped(path: str, mtime_ns: int) -> bytes:
    return gzip.compress(Path(path).read_bytes(), compresslevel=6, mtime=0)


class _Server(http.server.ThreadingHTTPServer):
    proxied: list[str]    # requests for other hosts that reached this server as their proxy

    def handle_error(self, request, client_address) -> None:
        """A connection the browser drops when it leaves a page is not an error of the site."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serve(directory: Path, handler: type[_QuietHandler] = _QuietHandler):
    """Serve ``directory`` on 127.0.0.1 from a thread (with ``handler``, a :class:`_QuietHandler`);
    yields the base URL and the list of requests for other hosts that arrived here as their proxy."""
    httpd = _Server(("127.0.0.1", 0), functools.partial(handler, directory=str(directory)))
    httpd.proxied = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/", httpd.proxied
    finally:
        httpd.shutdown()
        httpd.server_close()
