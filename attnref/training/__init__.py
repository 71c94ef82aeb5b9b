"""Controlled training experiments of chapter 8 (claims E1–E5): seeded synthetic tasks
(:mod:`~attnref.training.tasks`), tiny models built from attnref's parts
(:mod:`~attnref.training.models`) and a deterministic CPU training loop
(:mod:`~attnref.training.train`). ``tools/run_experiments.py`` (``make experiments``) runs them all
and writes ``data/experiments/*.json``; notebook 08 reads those files.
"""

from attnref.training import experiments, models, tasks, train

__all__ = ["experiments", "models", "tasks", "train"]
