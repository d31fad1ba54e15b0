"""Gives the C heap's free memory back to the kernel once start-up is over.

Importing the agent's libraries (gRPC, protobuf, pynvml, prometheus_client) and parsing its
configuration allocate and free several MiB; glibc keeps freed chunks for reuse, so without a
trim they stay in the agent's RSS (and its container's memory usage) for its whole life.
`malloc_trim(0)` returns them (bench/agent_imports.py measures ~0.8 MiB). It is glibc's: on
another C library (musl) there is nothing to call and nothing happens."""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("gpu_agent.heap")


def trim_c_heap() -> bool:
    """True when glibc released memory, False when it had none to release or is not there."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own symbols, libc's among them
    except (OSError, AttributeError):
        log.debug("no malloc_trim in this C library: the heap is left as it is")
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return bool(trim(0))
