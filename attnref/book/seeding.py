"""The one source of randomness of the book.

The seed comes from the environment variable ``ATTNREF_SEED`` (default 0). Every notebook and
test draws from :func:`generator` with a *stream name* (usually the claim ID), so that adding a
draw in one section never shifts the numbers of another, and every assertion can be re-run for
any seed (``ATTNREF_SEED=7 make test-seeds``).
"""

from __future__ import annotations

import os
import zlib

import torch

SEED_VARIABLE = "ATTNREF_SEED"
_reads = 0   # how many times this process has read the seed (see seed_was_read)


def seed() -> int:
    """The book's seed: ``int(os.environ["ATTNREF_SEED"])``, or 0 when unset."""
    global _reads
    _reads += 1
    raw = os.environ.get(SEED_VARIABLE, "0")
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{SEED_VARIABLE} must be an integer, got {raw!r}") from None


def seed_was_read() -> bool:
    """Whether anything in this process has read the seed (through :func:`seed`, which every
    generator and draw of this module goes through). A notebook whose kernel never did cannot
    depend on ``ATTNREF_SEED``: the seed re-runs of ``make test`` skip it."""
    return _reads > 0


def generator(stream: str = "") -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from the book's seed and a stream name.

    The same (seed, stream) always gives the same numbers; different streams are independent
    for all practical purposes.
    """
    g = torch.Generator()
    g.manual_seed((seed() * 1_000_003 + zlib.crc32(stream.encode())) % (2**63))
    return g


def randn(*shape: int, stream: str = "", generator_: torch.Generator | None = None,
          dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Standard normal samples in float64 from a stream (or from a given generator)."""
    g = generator(stream) if generator_ is None else generator_
    return torch.randn(*shape, generator=g, dtype=dtype)
