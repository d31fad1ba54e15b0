"""How a program of ours starts and ends (gpu-extender, its ingest workers, the gpu-relay): the
`*_created` series off (they only add noise to every scrape), its settings loaded, its logging
configured, its event loop run. A setting it refuses, or a port it cannot listen on, is one line on
stderr, `NAME: why`, and exit code 2: an operator reads what to fix, not a traceback."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from prometheus_client import disable_created_metrics

from gpuextender.common.logs import configure_logging

T = TypeVar("T")


def fail(name: str, message: str) -> int:
    print(f"{name}: {message}", file=sys.stderr)
    return 2


def run_program(
    name: str,
    load: Callable[[], T],
    main: Callable[[T], Coroutine[Any, Any, int]],
    *,
    refused: tuple[type[Exception], ...],
    log_settings: Callable[[T], tuple[str, str]],
    interrupted: int | None = None,
) -> int:
    """`load` the settings, then run `main` over them on a new event loop; its exit code. `refused`:
    what `load` or `main`'s start raises for a setting it refuses (the line says why);
    `log_settings`: the level and format of the loaded settings; `interrupted`: the exit code of a
    Ctrl-C (None: it propagates)."""
    disable_created_metrics()
    try:
        loaded = load()
    except refused as exc:
        return fail(name, str(exc))
    configure_logging(*log_settings(loaded))
    try:
        return asyncio.run(main(loaded))
    except refused as exc:
        return fail(name, str(exc))
    except OSError as exc:
        return fail(name, f"cannot listen: {exc.strerror or exc}")
    except KeyboardInterrupt:
        if interrupted is None:
            raise
        return interrupted
