"""A CUDA load (bench/gpu_load.py) in a child process, for the real-GPU checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MODES = ("idle", "hold", "spin", "matmul")


class Load:
    """Started and running when constructed ("idle" starts nothing); stop() ends it."""

    def __init__(self, root: Path, mode: str, seconds: float) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown load {mode!r}: one of {', '.join(MODES)}")
        self.mode = mode
        self.proc: subprocess.Popen[str] | None = None
        if mode == "idle":
            return
        self.proc = subprocess.Popen(
            [sys.executable, str(root / "bench" / "gpu_load.py"), mode, str(seconds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "ready" not in line:
            self.proc.kill()
            rest = self.proc.stdout.read()
            raise RuntimeError(f"load {mode} did not start: {line}{rest}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
