"""What a training process holds in memory: its share of the policy's parameters, gradients and optimizer state
(local shards only under FSDP2), of the KL reference, and its peak memory, as `DistributedBackend.memory` and
`rlep bench update` report.

The peak is the kernel's on the CPU: VmHWM of /proc/self/status, which `reset_peak` starts again (writing 5 to
/proc/self/clear_refs, Linux), so a benchmark reports the building of the model and the update steps apart;
elsewhere getrusage's lifetime peak. On a GPU also CUDA's peak allocation (reset by `reset_peak` too).
"""

from __future__ import annotations

from pathlib import Path

import torch

STATUS, CLEAR_REFS = Path("/proc/self/status"), Path("/proc/self/clear_refs")


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def tensor_bytes(tensors) -> int:
    """Bytes of the local parts of `tensors`, each storage once (a tied head shares the embedding's)."""
    unique = {id(t): _local(t) for t in tensors if t is not None}
    return sum(t.numel() * t.element_size() for t in unique.values())


def peak_rss_bytes() -> int:
    """This process's peak resident set since it started or since the last `reset_peak`."""
    if STATUS.exists():
        for line in STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def reset_peak(device: torch.device) -> None:
    """Start the peaks again from now (where the kernel allows it; a lifetime peak stays otherwise)."""
    if CLEAR_REFS.exists():
        try:
            CLEAR_REFS.write_text("5")
        except OSError:
            pass
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def rank_memory(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    reference: torch.nn.Module | None = None,
) -> dict[str, float]:
    """This process's share of the training state and of the KL reference in bytes (local shards only), and its
    peak memory."""
    params = list(model.parameters())
    facts = {
        "param_bytes": tensor_bytes(params),
        "grad_bytes": tensor_bytes(p.grad for p in params),
        "optimizer_bytes": tensor_bytes(v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)),
        "reference_bytes": tensor_bytes(reference.parameters()) if reference is not None else 0,
        "peak_rss_bytes": peak_rss_bytes(),
    }
    if device.type == "cuda":
        facts["peak_cuda_bytes"] = torch.cuda.max_memory_allocated(device)
    return facts
