r"""Seeded synthetic tasks that need attention.

Every task is **associative recall**: a sequence of ``n`` key–value pairs with distinct keys,
then a query key; the answer is the value paired with the query. A pair is one token (the sum of
a key embedding and a value embedding), so the task needs no positions and can be posed at any
length ``n ≤ keys``: the same generator is *retrieval among n keys* when ``n`` varies.

The answer is independent of the query token alone (values are drawn uniformly and independently
of the keys), so a model that does not mix tokens — a per-token MLP reading the query position —
cannot beat chance ``1 / values``; a model must bring the matching pair's value to the query.

Batches are drawn from a ``torch.Generator`` seeded by the caller: the same seed gives the same
data in the same order (what pairs the variants of an experiment).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

Tensor = torch.Tensor


@dataclass(frozen=True)
class Recall:
    """One batch: ``keys (B, n)`` and ``values (B, n)`` of the pairs, ``query (B,)``, ``answer (B,)``."""

    keys: Tensor
    values: Tensor
    query: Tensor
    answer: Tensor

    @property
    def n(self) -> int:
        return int(self.keys.shape[1])

    def __len__(self) -> int:
        return int(self.keys.shape[0])


@dataclass(frozen=True)
class RecallTask:
    """Associative recall with ``keys`` possible keys and ``values`` possible values."""

    keys: int = 64
    values: int = 16

    def __post_init__(self) -> None:
        if self.keys < 1 or self.values < 2:
            raise ValueError(f"need keys ≥ 1 and values ≥ 2, got {self.keys}, {self.values}")

    @property
    def chance(self) -> float:
        """Accuracy of a model that does not see the pairs: 1 / values."""
        return 1.0 / self.values

    def batch(self, batch_size: int, n: int, generator: torch.Generator) -> Recall:
        """``batch_size`` sequences of ``n`` pairs with distinct keys and a query among them."""
        if not 1 <= n <= self.keys:
            raise ValueError(f"n = {n} pairs need 1 ≤ n ≤ keys = {self.keys}")
        # n distinct keys: a random permutation's first n (float32 draws whatever torch's default dtype)
        draws = torch.rand(batch_size, self.keys, generator=generator, dtype=torch.float32)
        keys = draws.argsort(dim=1)[:, :n]
        values = torch.randint(self.values, (batch_size, n), generator=generator)
        where = torch.randint(n, (batch_size,), generator=generator)
        rows = torch.arange(batch_size)
        return Recall(keys, values, keys[rows, where], values[rows, where])


def generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``."""
    return torch.Generator().manual_seed(int(seed))
