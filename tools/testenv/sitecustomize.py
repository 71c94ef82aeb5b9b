"""Imported by Python at start-up when ``tools/testenv`` is on ``PYTHONPATH``.

The Makefile puts this folder on ``PYTHONPATH`` for the tests, the notebook kernels they
start and the book build, so every one of those processes refuses network connections that
would leave the machine (see ``netguard.py``). A ``sitecustomize`` that this file shadows
(one further along ``sys.path``) is still run.
"""

import importlib.machinery
import importlib.util
import os
import sys

import netguard

netguard.install()


def _run_shadowed_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_run_shadowed_sitecustomize()
