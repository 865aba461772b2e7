"""GRPO-style training with experience replay: pure maths (advantages, losses), the trainer loop, checkpoints."""
