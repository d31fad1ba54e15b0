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

from collections.abc import Sequence

from gpuextender.common.dial import DialSettings
from gpuextender.common.program import run_program
from gpuextender.common.serving_tls import ServingCertificate, TlsLoadError, serving_certificate
from gpuextender.extender.flags import ConfigError
from gpuextender.extender.relay.relay_app import serve
from gpuextender.extender.relay.relay_flags import RelaySettings, parse
from gpuextender.extender.settings import ExtenderConfig


def main(argv: Sequence[str]) -> int:
    def load() -> tuple[RelaySettings, ExtenderConfig, DialSettings, ServingCertificate | None]:
        settings, config, dial = parse(argv)
        return settings, config, dial, serving_certificate(config.tls)

    return run_program(
        "gpu-extender relay",
        load,
        lambda loaded: serve(loaded[1], loaded[0], loaded[2], loaded[3]),
        refused=(ConfigError, TlsLoadError),
        log_settings=lambda loaded: (loaded[1].log_level, loaded[1].log_format),
    )
