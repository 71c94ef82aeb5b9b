"""Optional dependencies: which extra of ``attnref`` brings which package, and a clear error when one is missing.

``pip install attnref`` needs torch and numpy only: attention, multi-head attention, the layers,
the decoder parts, QK-norm, sigmoid attention and the counts. The rest is behind extras:

* ``attnref[book]``: the book's helpers — sympy (derivations, ``attnref.analysis.symbolic``,
  ``series``, ``lowrank``, ``book.typeset``), scipy (``analysis.stats``' exact bounds, chapter 8's
  intervals), matplotlib and IPython (``book.plotting``);
* ``attnref[models]``: the trained models and the audit — safetensors, tokenizers, transformers, gguf.

Where attnref's own code imports one of these packages and it is not installed, the import raises
``ModuleNotFoundError`` naming the package and the extra (``pip install 'attnref[book]'``) instead
of a bare "No module named 'sympy'". The finder (:class:`_MissingExtraFinder`, last on
``sys.meta_path``) is consulted only after every other finder failed, and only for imports made by
attnref's modules; anyone else's import of a missing package fails as usual.
"""

from __future__ import annotations

import sys

#: top-level module -> (the extra that installs it, the distribution's name on PyPI)
EXTRAS: dict[str, tuple[str, str]] = {
    "sympy": ("book", "sympy"),
    "scipy": ("book", "scipy"),
    "matplotlib": ("book", "matplotlib"),
    "matplotlib_inline": ("book", "matplotlib-inline"),
    "IPython": ("book", "ipython"),
    "safetensors": ("models", "safetensors"),
    "tokenizers": ("models", "tokenizers"),
    "transformers": ("models", "transformers"),
    "gguf": ("models", "gguf"),
}


def missing_message(module: str, importer: str = "attnref") -> str:
    """The message for a missing optional package: what needs it and the extra to install."""
    top = module.split(".")[0]
    extra, distribution = EXTRAS[top]
    return (f"{importer} needs the package {distribution!r} ({top}), which is not installed; it is part of "
            f"attnref's optional extra [{extra}]: pip install 'attnref[{extra}]' (or pip install {distribution})")


def _importer() -> str | None:
    """The module whose ``import`` statement is being executed (the first frame outside importlib)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not name.startswith("importlib") and name != __name__:
            return name
        frame = frame.f_back
    return None


class _MissingExtraFinder:
    """A meta path finder consulted last: for an optional package that no other finder found,
    imported from attnref, it raises the error naming the extra."""

    @classmethod
    def find_spec(cls, fullname: str, path=None, target=None):
        if path is not None or fullname.split(".")[0] not in EXTRAS:
            return None                        # submodules and other packages: not ours to judge
        importer = _importer()
        if importer is None or not (importer == "attnref" or importer.startswith("attnref.")):
            return None
        raise ModuleNotFoundError(missing_message(fullname, importer), name=fullname)


def install() -> None:
    """Put the finder at the end of ``sys.meta_path`` (once)."""
    if not any(isinstance(f, type) and f is _MissingExtraFinder for f in sys.meta_path):
        sys.meta_path.append(_MissingExtraFinder)
