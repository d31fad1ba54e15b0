"""One log format for both programs, to stderr: `time level logger: message`, or one JSON object
per line (`--log-format json`) for log pipelines.

Call sites pass the fields a log pipeline filters on as `extra={"node": ..., "pod": ..., "verb":
..., "reason": ...}`; the text format keeps them in the message, the JSON format adds them as keys.
"""

from __future__ import annotations

import json
import logging
import sys
import time

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")
# The structured fields call sites may attach with `extra=`; only these become JSON keys.
FIELDS = ("node", "pod", "verb", "reason", "peer", "address")


class JsonFormatter(logging.Formatter):
    """`{"time": RFC 3339 UTC with ms, "level", "logger", "message", fields..., "exception"}`."""

    def format(self, record: logging.LogRecord) -> str:
        seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        entry: dict[str, object] = {
            "time": f"{seconds}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure_logging(level: str, fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # grpc/aiohttp access chatter stays out of the way unless asked for.
    if level.lower() != "debug":
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
