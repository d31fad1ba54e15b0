"""A small CUDA load for bench/gpu_check.py, run on a machine with a GPU and PyTorch.

    python bench/gpu_load.py matmul SECONDS   # bf16 8192^3 matrix products back to back: SMs and tensor pipes busy
    python bench/gpu_load.py spin SECONDS     # one thread of one block spinning: "a kernel is running" all the
                                              # time (utilization near 100 %) with one SM of ~132 in use
    python bench/gpu_load.py hold SECONDS     # 8 GiB allocated, no kernel: memory used, utilization 0

Prints "ready" once the load runs, so the caller can start measuring; exits after SECONDS.
Not part of the product: PyTorch is only on the GPU machine (KINDS.md), never a dependency.
"""

from __future__ import annotations

import sys
import time


def main() -> int:
    mode, seconds = sys.argv[1], float(sys.argv[2])
    import torch  # only on the GPU machine

    device = torch.device("cuda:0")
    end = time.monotonic() + seconds
    if mode == "matmul":
        a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
        (a @ b).sum().item()
        print("ready", flush=True)
        while time.monotonic() < end:
            for _ in range(20):
                c = a @ b
            c.sum().item()
    elif mode == "spin":
        torch.cuda._sleep(1000)  # the one-thread spin kernel PyTorch ships (clock64 loop, <<<1, 1>>>)
        torch.cuda.synchronize()
        print("ready", flush=True)
        while time.monotonic() < end:
            torch.cuda._sleep(50_000_000)  # ~25-50 ms at 1-2 GHz
            torch.cuda.synchronize()
    elif mode == "hold":
        held = torch.empty(8 * 1024**3, dtype=torch.uint8, device=device)
        held.fill_(1)
        torch.cuda.synchronize()
        print("ready", flush=True)
        while time.monotonic() < end:
            time.sleep(0.1)
    else:
        print(f"unknown mode {mode!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
