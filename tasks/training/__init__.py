"""GRPO-style training with experience replay, in four rooms: `maths` (advantages, losses, log-probs, batches, the
update), `backends` (the processes that update the policy), `generation` (where answers come from and how new
weights reach the engines) and `loop` (a run's steps); `trainer.train` is the entry point."""
