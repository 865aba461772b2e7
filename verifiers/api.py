"""The verifier's entry points: `verify` and `verify_batch`.

The caller's process only validates options, refuses over-long responses and removes duplicate pairs;
all extraction and comparison happens in the worker pool (verifiers.sandbox) under the hard limits, so no
model output is parsed in the caller. Hostile input yields a verdict (`timeout`, `too-long`,
`parse-error`, `memory`, `crash`), never an exception.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlep.tasks.settings.verifier import VerifierConfig, config_from_options
from rlep.verifiers.sandbox import shared_pool
from rlep.verifiers.verdict import Verdict


def verify(response: str, gold: str, *, config: VerifierConfig | None = None, **options) -> Verdict:
    """Whether the final answer in `response` is equivalent to `gold`.

    `options` are VerifierConfig fields (e.g. `timeout_seconds=1.0`, `fallback_last_number=False`),
    applied on top of `config` (or the defaults); an unknown name raises TypeError.
    """
    return verify_batch([response], [gold], config=config, **options)[0]


def verify_batch(
    responses: Sequence[str], golds: Sequence[str], *, config: VerifierConfig | None = None, **options
) -> list[Verdict]:
    """`verify` for each (response, gold) pair, in parallel across the worker pool, in input order.

    Identical pairs (common with several samples per prompt) are judged once. Safe to call from any
    thread, and from several threads at once.
    """
    resolved = config_from_options(config, options)
    if len(responses) != len(golds):
        raise ValueError(f"{len(responses)} responses but {len(golds)} gold answers")
    verdicts: list[Verdict | None] = [None] * len(responses)
    owners: dict[tuple[str, str], list[int]] = {}
    for index, (response, gold) in enumerate(zip(responses, golds, strict=True)):
        if not isinstance(response, str) or not isinstance(gold, str):
            raise TypeError(
                f"pair {index}: responses and golds must be str, got {type(response).__name__} "
                f"and {type(gold).__name__}"
            )
        if len(response) > resolved.max_response_chars:
            verdicts[index] = Verdict(correct=False, extracted=None, reason="too-long", seconds=0.0)
            continue
        owners.setdefault((response, gold), []).append(index)
    # Sorted by gold, so that the samples of one prompt travel in the same chunk to the same worker,
    # whose caches (parsed gold, symbolic results) then serve all of them.
    pairs = sorted(owners, key=lambda pair: pair[1])
    rows = shared_pool(resolved).run(pairs, resolved) if pairs else []
    for pair, row in zip(pairs, rows, strict=True):
        verdict = Verdict(*row)
        for index in owners[pair]:
            verdicts[index] = verdict
    return verdicts  # type: ignore[return-value]
