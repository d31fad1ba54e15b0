"""How the extender starts an ingest worker, read back; each worker's share of the limits."""

from __future__ import annotations

import pytest

from gpuextender.extender.flags import build_config
from gpuextender.extender.workers.worker_args import Worker, parse_worker_argv, worker_argv


def test_the_argv_reads_back() -> None:
    argv = worker_argv(7, Worker(2, 3, 9090), ["--grpc-addr", "0.0.0.0:0", "--", "x"])
    assert parse_worker_argv(argv) == (7, Worker(2, 3, 9090), ["--grpc-addr", "0.0.0.0:0", "--", "x"])


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--link-fd", "7"],
        ["--link-fd", "7", "--worker", "0/1", "--port", "9090"],  # no --
        ["--link-fd", "7", "--worker", "1/1", "--port", "9090", "--"],  # index past the count
        ["--link-fd", "7", "--worker", "0/1/2", "--port", "9090", "--"],
        ["--link-fd", "7", "--worker", "0/1", "--port", "0", "--"],
        ["--link-fd", "7", "--worker", "0/1", "--port", "65536", "--"],
        ["--link-fd", "-1", "--worker", "0/1", "--port", "9090", "--"],
        ["--link-fd", "x", "--worker", "0/1", "--port", "9090", "--"],
        ["--worker", "0/1", "--link-fd", "7", "--port", "9090", "--"],  # out of order
        ["--grpc-addr", "0.0.0.0:9090"],  # by hand
    ],
)
def test_anything_else_is_refused(argv: list[str]) -> None:
    assert parse_worker_argv(argv) is None


def test_edges_of_the_port_and_index() -> None:
    assert parse_worker_argv(["--link-fd", "0", "--worker", "0/1", "--port", "1", "--"]) == (0, Worker(0, 1, 1), [])
    assert parse_worker_argv(["--link-fd", "3", "--worker", "3/4", "--port", "65535", "--"]) is not None


@pytest.mark.parametrize(("limit", "count", "share"), [(64, 1, 64), (64, 3, 22), (64, 4, 16), (0, 4, 0), (1, 8, 1)])
def test_each_worker_serves_the_held_port_with_its_share_of_unknown_nodes(limit: int, count: int, share: int) -> None:
    config = build_config(["--grpc-addr", "10.0.0.1:0", "--max-unknown-nodes", str(limit)])
    mine = Worker(0, count, 4242).config(config)
    assert (mine.grpc_addr.host, mine.grpc_addr.port, mine.max_unknown_nodes) == ("10.0.0.1", 4242, share)
    assert mine.idle_rule == config.idle_rule and mine.api == config.api  # nothing else changes
