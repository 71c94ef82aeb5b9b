"""Shared fixtures: a seeded generator per test, float64 helpers, hypothesis settings."""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings

from attnref import seeding

# Property tests: enough examples to find shape bugs, few enough to keep `make test` fast.
settings.register_profile("book", max_examples=40, deadline=None, derandomize=False)
settings.load_profile("book")

#: Parity tolerance in float64: a few hundred ulps of the values involved.
PARITY_ATOL = 1e-12


@pytest.fixture
def gen(request) -> torch.Generator:
    """A generator seeded from ATTNREF_SEED and the test's name."""
    return seeding.generator(request.node.name)


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)
