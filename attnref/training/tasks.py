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
    queries: int = 1      # keys asked at once: 2 asks for the values of two keys, answer v_a·values + v_b

    def __post_init__(self) -> None:
        if self.keys < 1 or self.values < 2:
            raise ValueError(f"need keys ≥ 1 and values ≥ 2, got {self.keys}, {self.values}")
        if self.queries not in (1, 2):
            raise ValueError(f"queries must be 1 or 2, got {self.queries}")

    @property
    def classes(self) -> int:
        """Possible answers: values, or values² when two keys are asked."""
        return self.values ** self.queries

    @property
    def chance(self) -> float:
        """Accuracy of a model that does not see the pairs: 1 / classes."""
        return 1.0 / self.classes

    def batch(self, batch_size: int, n: int, generator: torch.Generator) -> Recall:
        """``batch_size`` sequences of ``n`` pairs with distinct keys and a query among them."""
        if not self.queries <= n <= self.keys:
            raise ValueError(f"n = {n} pairs need {self.queries} ≤ n ≤ keys = {self.keys}")
        # n distinct keys: a random permutation's first n (float32 draws whatever torch's default dtype)
        draws = torch.rand(batch_size, self.keys, generator=generator, dtype=torch.float32)
        keys = draws.argsort(dim=1)[:, :n]
        values = torch.randint(self.values, (batch_size, n), generator=generator)
        rows = torch.arange(batch_size)
        if self.queries == 2:             # two distinct pairs, in a random order
            where = torch.rand(batch_size, n, generator=generator).argsort(dim=1)[:, :2]
            a, b = where[:, 0], where[:, 1]
            query = torch.stack([keys[rows, a], keys[rows, b]], 1)
            return Recall(keys, values, query, values[rows, a] * self.values + values[rows, b])
        where = torch.randint(n, (batch_size,), generator=generator)
        return Recall(keys, values, keys[rows, where], values[rows, where])


def generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``."""
    return torch.Generator().manual_seed(int(seed))
