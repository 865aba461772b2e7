"""The maths of a step, as functions of tensors and rollouts: advantages, the policy loss, per-token log-probs, the
padded batch, the rewards of a step's answers and the PPO-style update over mini-batches."""
