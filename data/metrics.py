"""Sampling metrics over K answers per problem: avg@K, unbiased pass@k, maj@K."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from math import comb

# The `data_source` of a table row that aggregates every source (evaluation and inspection tables).
ALL_SOURCES = "all"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of P(at least one of k draws is correct) from n samples with c correct.

    1 - C(n-c, k) / C(n, k)  (Chen et al. 2021, "Evaluating Large Language Models Trained on Code").
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def majority_correct(answers: Sequence[str | None], correct: Sequence[bool]) -> bool:
    """maj@K for one problem: is the most frequent extracted answer a correct one?

    Votes go to the extracted answer string (answers with no extraction do not vote); ties go to the
    answer seen first. Two spellings of one value (0.75, 3/4) count as different votes.
    """
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return False
    top = max(votes.values())
    winner = next(a for a in answers if a is not None and votes[a] == top)
    return any(ok for a, ok in zip(answers, correct) if a == winner)
