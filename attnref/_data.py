"""Where the book's stored data are, and what to say when they are not there.

The stored results (``data/experiments``, ``data/smollm2-measurements``, …) live in the book's
repository and in its download bundle, not in the ``attnref`` wheel: they are the output of long
runs (``make experiments``, ``make measure``), checked for drift against the code that made them.
In a repository checkout a missing file is remade by its make target; for an installed package
the message says where the files are and how the lookup finds them.
"""

from __future__ import annotations

from pathlib import Path

#: The folder that holds the ``attnref`` package: a repository checkout, or site-packages (a wheel).
ROOT = Path(__file__).resolve().parent.parent


def in_checkout() -> bool:
    """Whether attnref runs from the book's repository (its Makefile beside the package)."""
    return (ROOT / "Makefile").is_file() and (ROOT / "pyproject.toml").is_file()


def missing(path: Path, make_target: str, duration: str, variable: str | None = None) -> str:
    """The one-line message for a stored data file that is not found at ``path``."""
    if in_checkout():
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        return f"{shown} is missing: run `make {make_target}` ({duration}) to compute and write it"
    hint = f", or set {variable} to the folder that holds it" if variable else ""
    return (f"{path.name} was not found (looked in {path.parent}): attnref is installed as a package "
            f"({ROOT}) and its stored data are not part of the wheel. They are in the book's repository "
            f"and in its download bundle, folder data/: run from that folder or its notebooks/ folder (the "
            f"lookup tries ./data and ../data){hint}; or clone the repository and run `make {make_target}`")
