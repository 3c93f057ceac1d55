"""``device=cuda`` (and ``device=auto`` where a GPU is visible, and every rank of ``device=ddp``
on NCCL): one CUDA GPU.

- placement: the GPU ``device.index`` is made this process's current device
  (`torch.cuda.set_device`, which makes its context), remembered in
  `sweeps.state.ProcessState.cuda_contexts`; a process whose context a sticky error lost
  (`sweeps.state.ProcessState.cuda_lost`) runs no more CUDA jobs;
- time: phases are CUDA events on the job's device's stream (`sweeps.train.timing`), and
  `synchronize` waits for that device;
- memory: the caching allocator's peak of tensors (`torch.cuda.max_memory_allocated`, MB),
  emptied and reset after each job (and max_batch trial); cuBLAS workspaces allocated before a
  baseline (`CUDA.warm_up`);
- arithmetic: bf16 autocast needs compute capability 8.0 (Ampere) or newer; fused optimizers;
- data: host batches pinned (page-locked) for asynchronous copies;
- telemetry: the job's GPUs through NVML.
"""
from __future__ import annotations

import torch

from sweeps.devices.base import DeviceKind
from sweeps.errors import DeviceUnavailable, brief
from sweeps.state import current


class CUDA(DeviceKind):
    """One CUDA GPU (see the module docstring)."""

    name = "cuda"
    type = "cuda"
    events = True
    host_memory = False
    asynchronous = True
    telemetry = "nvml"

    def available(self) -> str:
        if lost := current().cuda_lost:
            return (f"an earlier job's sticky CUDA error lost this process's CUDA context "
                    f"({lost[:200]}); rerun the sweep to run this job in a fresh process")
        if not torch.cuda.is_available():
            return ("device=cuda but no CUDA device is visible here "
                    "(torch.cuda.is_available() is False); use device=cpu or device=auto")
        return ""

    def torch_device(self, index: int | None = None) -> torch.device:
        """``cuda:<index>``, made this process's current device (``torch.cuda.set_device``: CUDA
        >= 12 makes the primary context on that GPU at once): whatever uses the current device
        (cuBLAS handles, Triton, CUDA graphs, events recorded without a stream) then uses the job's."""
        if why := self.available():
            raise DeviceUnavailable(why)
        index = 0 if index is None else index
        if not 0 <= index < torch.cuda.device_count():
            raise DeviceUnavailable(f"device.index={index} but this machine has "
                                    f"{torch.cuda.device_count()} CUDA device(s): use 0..{torch.cuda.device_count() - 1}")
        torch.cuda.set_device(index)
        current().cuda_contexts.add(int(index))
        return torch.device("cuda", index)

    def synchronize(self, device: torch.device) -> None:
        torch.cuda.synchronize(device)

    def reset_peak(self, device: torch.device) -> None:
        """No-op where this process never initialised CUDA or lost its context."""
        if torch.cuda.is_initialized() and not current().cuda_lost:
            torch.cuda.reset_peak_memory_stats(device)

    def peak_mb(self, device: torch.device) -> float | None:
        """Peak allocated by tensors on ``device`` (MB)."""
        return torch.cuda.max_memory_allocated(device) / 2**20

    def free_memory(self) -> None:
        """Empty the caching allocator and reset every GPU's peak statistics; CUDA is left alone
        where this process never initialised it (a CPU job on a GPU machine: resetting the
        statistics of an allocator that does not exist raises) and where a sticky error has lost
        its context (a failure here notes the context lost)."""
        state = current()
        if torch.cuda.is_available() and torch.cuda.is_initialized() and not state.cuda_lost:
            try:
                torch.cuda.empty_cache()
                for i in range(torch.cuda.device_count()):
                    torch.cuda.reset_peak_memory_stats(i)
            except RuntimeError as e:  # a context lost under us: the next job says so, this one ends
                state.cuda_lost = state.cuda_lost or brief(e, 300)

    def warm_up(self, device: torch.device) -> None:
        """A small matmul on ``device``, forward and backward, so cuBLAS has allocated its
        workspaces (through the caching allocator, per handle and stream, and the handles are per
        thread) before a memory baseline is taken: the forward's on this thread, and the
        backward's on the autograd engine's device thread, which has a handle of its own (measured
        on an H100, torch 2.11: a 32-MiB workspace that the first backward added and that stayed)."""
        with torch.inference_mode(False), torch.enable_grad():  # a backward, whatever the caller's mode
            a = torch.ones(8, 8, device=device, requires_grad=True)
            (a @ a + torch.addmm(a[0], a, a)).sum().backward()  # cuBLAS and cuBLASLt (addmm's bias epilogue)
            a.grad.sum().item()

    def autocast_supported(self, device: torch.device, dtype: torch.dtype) -> bool:
        """bf16 needs compute capability 8.0 (Ampere) or newer; else as `DeviceKind`."""
        if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported(False):
            return False
        return super().autocast_supported(device, dtype)

    def supports_fused_optimizer(self) -> bool:
        return True

    def pin_memory(self) -> bool:
        return True
