"""gpuextender.common.heap: the once-at-start trim really gives freed C-heap memory back (glibc)."""

from __future__ import annotations

import ctypes
import platform

import pytest

from gpuextender.common.heap import trim_c_heap

CHUNK = 64 * 1024  # below glibc's mmap threshold (128 KiB): served from the heap, kept after free()
CHUNKS = 1024  # 64 MiB


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_heap_memory_leaves_the_rss_only_with_the_trim() -> None:
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    trim_c_heap()
    before = rss_kib()
    chunks = [libc.malloc(CHUNK) for _ in range(CHUNKS)]
    for chunk in chunks:
        ctypes.memset(chunk, 1, CHUNK)  # touched: in the RSS now
    # Freed in an order that keeps the top chunk in use, so glibc cannot shrink the heap by itself.
    for chunk in chunks[:-1]:
        libc.free(chunk)
    kept = rss_kib() - before
    assert kept > CHUNKS * CHUNK // 1024 // 2  # freed, yet still held by the process
    assert trim_c_heap() is True
    assert rss_kib() - before < kept // 4  # given back
    libc.free(chunks[-1])
