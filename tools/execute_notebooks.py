"""Execute notebooks in place, the way their stored outputs are meant to be produced.

    python tools/execute_notebooks.py [notebooks/NAME.ipynb ...]   (default: every notebook)

Runs each notebook top to bottom in a fresh kernel with the default seed (``ATTNREF_SEED``
unset, so 0) and one thread, from the notebook's folder, then normalises the metadata
(kernel name, no timings, no machine paths) so that the stored file depends only on the code.
Stops at the first failing cell with the cell's error.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def normalise(nb: nbformat.NotebookNode) -> None:
    nb.metadata = {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
    for cell in nb.cells:
        cell.metadata.pop("execution", None)


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=120, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    elapsed = time.perf_counter() - start
    normalise(nb)
    nbformat.write(nb, path)
    return elapsed


def main(argv: list[str]) -> int:
    os.environ.pop("ATTNREF_SEED", None)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
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
