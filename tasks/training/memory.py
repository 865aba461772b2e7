"""What a training process holds in memory: its share of the policy's parameters, gradients and optimizer state
(local shards only under FSDP2) and its peak memory, as `DistributedBackend.memory` and `rlep bench update` report."""

from __future__ import annotations

import torch


def rank_memory(model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: torch.device) -> dict[str, float]:
    """This process's share of the training state in bytes (local shards only) and its peak memory."""
    import resource

    def local(t: torch.Tensor) -> torch.Tensor:
        return t.to_local() if hasattr(t, "to_local") else t

    params = list({id(p): p for p in model.parameters()}.values())
    facts = {
        "param_bytes": sum(local(p).numel() * local(p).element_size() for p in params),
        "grad_bytes": sum(local(p.grad).numel() * local(p.grad).element_size() for p in params if p.grad is not None),
        "optimizer_bytes": sum(
            local(v).numel() * local(v).element_size()
            for s in optimizer.state.values()
            for v in s.values()
            if torch.is_tensor(v)
        ),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # Linux reports KiB
    }
    if device.type == "cuda":
        facts["peak_cuda_bytes"] = torch.cuda.max_memory_allocated(device)
    return facts
