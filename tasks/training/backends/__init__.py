"""Who updates the policy and how: one process, or torch.distributed ranks (DDP, FSDP2) launched by torchrun or as
Ray actors; their policy (LoRA, precision), collectives, checkpoints and random streams (docs/distributed.md)."""
