"""`gpu-extender relay`: agents stream to it as to an extender; it forwards what it accepted to
every extender replica, many nodes per message (docs/relay.md). Its flags: relay_flags.py; its
parts: relay_app.py.

Why: each agent connection costs an extender ~42 KB in plaintext and ~89 KB over TLS in gRPC
alone (bench/RESULTS.md), before any state of ours: ~1.1-1.8 GB at 20,000 agents, and each
replica pays it. Relays take the agents' connections (scaled out as a Deployment of their own);
a replica then holds one stream per relay and pays per node only for what it keeps of it.

The agent-facing side is the extender's own: the same flags (--grpc-addr, --tls-*, --agent-*,
the report limits), the same checks, pacing and acks (ingest/service.py over
forward_store.ForwardStore). The acks tell the agents what the replicas said in their last
answer (idle rule, stale_after, light heartbeats, which only when every replica takes them).

One name, `gpu-extender relay`, not a console script of its own: the relay is the extender's
agent side (its flags, checks and limits are the extender's, read by the same code), so it ships
in the extender's package and image and is always the same version as the replicas it feeds.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from prometheus_client import disable_created_metrics

from gpuextender.common.logs import configure_logging
from gpuextender.common.serving_tls import TlsLoadError, serving_certificate
from gpuextender.extender.flags import ConfigError
from gpuextender.extender.relay.relay_app import serve
from gpuextender.extender.relay.relay_flags import parse


def main(argv: Sequence[str]) -> int:
    disable_created_metrics()
    try:
        settings, config, dial = parse(argv)
        certificate = serving_certificate(config.tls)
    except (ConfigError, TlsLoadError) as exc:
        print(f"gpu-extender relay: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log_level, config.log_format)
    try:
        return asyncio.run(serve(config, settings, dial, certificate))
    except OSError as exc:
        print(f"gpu-extender relay: cannot listen: {exc.strerror or exc}", file=sys.stderr)
        return 2
