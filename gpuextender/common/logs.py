"""One log format for both programs: `time level logger: message`, to stderr."""

from __future__ import annotations

import logging
import sys

LEVELS = ("debug", "info", "warning", "error")


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # grpc/aiohttp access chatter stays out of the way unless asked for.
    if level.lower() != "debug":
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
