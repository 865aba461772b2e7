"""Answer verification for math RL: did the model's final answer match the gold answer?

    from rlep.tasks.settings.reward import RewardConfig
    from rlep.verifiers import verify, verify_batch, reward
    verdicts = verify_batch(responses, golds, timeout_seconds=2.0)
    rewards = [reward(v, RewardConfig(scheme="signed")) for v in verdicts]

Answers are extracted (verifiers.extract), normalised (verifiers.normalize), compared exactly when they
are plain numbers (verifiers.fastpath) and symbolically otherwise (verifiers.equivalence), all inside a
pool of worker processes with hard time and memory limits (verifiers.sandbox, verifiers.worker). Policies
are documented in docs/verifiers.md. Importing this package loads neither sympy nor torch.
"""

from rlep.verifiers.api import verify, verify_batch
from rlep.verifiers.reward import reward, rewards
from rlep.verifiers.verdict import REASONS, Reason, Verdict

__all__ = [
    "REASONS",
    "Reason",
    "Verdict",
    "reward",
    "rewards",
    "verify",
    "verify_batch",
]
