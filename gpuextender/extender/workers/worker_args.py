"""How the extender starts an ingest worker (workers/worker_main.py), and what each worker serves:
`--link-fd FD --worker I/N --port P -- ARGV`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from gpuextender.common.netaddr import HostPort
from gpuextender.extender.settings import ExtenderConfig


@dataclasses.dataclass(frozen=True)
class Worker:
    """Which worker this is, of how many, on which port (the one the extender holds)."""

    index: int
    count: int
    port: int

    def config(self, config: ExtenderConfig) -> ExtenderConfig:
        """The extender's config as this worker serves it: on the held port, with its share of
        the unknown-node limit (the workers together hold at most the limit, plus one each for
        rounding up)."""
        return dataclasses.replace(
            config,
            grpc_addr=HostPort(config.grpc_addr.host, self.port),
            max_unknown_nodes=math.ceil(config.max_unknown_nodes / self.count),
        )


def worker_argv(link_fd: int, worker: Worker, argv: Sequence[str]) -> list[str]:
    return [
        *("--link-fd", str(link_fd), "--worker", f"{worker.index}/{worker.count}", "--port", str(worker.port)),
        "--",
        *argv,
    ]


def parse_worker_argv(argv: Sequence[str]) -> tuple[int, Worker, list[str]] | None:
    """(link fd, worker, the extender's argv), or None for anything worker_argv does not make."""
    argv = list(argv)
    if len(argv) < 7 or argv[0:6:2] != ["--link-fd", "--worker", "--port"] or argv[6] != "--":
        return None
    try:
        index, count = (int(part) for part in argv[3].split("/"))
        link_fd, port = int(argv[1]), int(argv[5])
    except ValueError:
        return None
    if not (0 <= index < count and 0 < port < 65536 and link_fd >= 0):
        return None
    return link_fd, Worker(index, count, port), argv[7:]
