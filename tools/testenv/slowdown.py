"""How much slower this machine runs than an idle one, for time limits that must hold under load.

A fixed time limit (a kernel must answer in 10 s, start in 60 s) is a statement about an idle
machine: on a shared one at load 18 on 2 cores every process gets about a ninth of a core, and
nbval's kernel start failed there, erroring a notebook's items at set-up before any ran. Limits are
therefore derived: ``limit(base)`` is ``base`` seconds (the idle budget) times :func:`factor`, the
run-queue length per core (the 1-minute load average over the cores, at least 1), read when the
limit is needed. ``ATTNREF_SLOWDOWN`` overrides the factor (e.g. a CI runner known to be slow).
This module needs only the standard library.
"""

from __future__ import annotations

import os


def factor() -> float:
    """max(1, 1-minute load average / cores), or ``ATTNREF_SLOWDOWN`` if set (a number ≥ 1)."""
    forced = os.environ.get("ATTNREF_SLOWDOWN")
    if forced:
        value = float(forced)
        if not value >= 1:
            raise ValueError(f"ATTNREF_SLOWDOWN must be a number ≥ 1, got {forced!r}")
        return value
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):          # no load average on this platform
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))


def limit(seconds: float) -> float:
    """A time limit of ``seconds`` on an idle machine, scaled to this machine's load now."""
    return float(seconds) * factor()
