"""Execute notebooks in place, the way their stored outputs are meant to be produced.

    python tools/execute_notebooks.py [notebooks/NAME.ipynb ...]   (default: every notebook)

Runs each notebook top to bottom in a fresh kernel with the default seed (``ATTNREF_SEED``
unset, so 0) and one thread, from the notebook's folder, offline (the kernel starts with the
network guard of ``tools/testenv``), then normalises the metadata (kernel name, no timings, no
machine paths) so that the stored file depends only on the code. Stops at the first failing
cell with the cell's error.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from traitlets.config import Config

ROOT = Path(__file__).resolve().parent.parent
TESTENV = ROOT / "tools" / "testenv"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def normalise(nb: nbformat.NotebookNode) -> None:
    """The notebook-level and cell-level metadata a stored notebook has (and nothing else)."""
    nb.metadata = {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
    for cell in nb.cells:
        cell.metadata.pop("execution", None)


def kernel_environment() -> None:
    """The environment every kernel of this repository runs in: default seed, one thread, offline."""
    os.environ.pop("ATTNREF_SEED", None)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", os.environ["OMP_NUM_THREADS"])
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(TESTENV) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(TESTENV)] + [p for p in paths if p])


def client_for(nb: nbformat.NotebookNode, path: Path) -> NotebookClient:
    """An nbclient for ``nb`` run from its folder.

    The kernel manager provisions CurveZMQ keys (``transport_encryption="auto"``; ipykernel's
    kernelspec declares support), so the kernel's messages to this process are encrypted and
    ipykernel does not print its "Kernel is running over TCP without encryption" warning.
    """
    config = Config()
    config.KernelManager.transport_encryption = "auto"
    return NotebookClient(nb, timeout=120, kernel_name="python3", record_timing=False, config=config,
                          resources={"metadata": {"path": str(path.parent)}})


def execute(path: Path, write: bool = True) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client_for(nb, path).execute()
    elapsed = time.perf_counter() - start
    if write:
        normalise(nb)
        nbformat.write(nb, path)
    return elapsed


def main(argv: list[str]) -> int:
    kernel_environment()
    paths = [Path(a).resolve() for a in argv] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    for path in paths:
        try:
            elapsed = execute(path)
        except CellExecutionError as error:
            print(f"{path.relative_to(ROOT)}: FAILED\n{error}", file=sys.stderr)
            return 1
        print(f"{path.relative_to(ROOT)}: {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
