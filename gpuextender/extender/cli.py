"""`gpu-extender`: the command line. `gpu-extender explain ...` asks a running extender
(ui/explain_cli.py), `gpu-extender relay ...` serves agents in front of the extenders
(relay/relay_main.py), `gpu-extender cleanup ...` removes what the extender wrote to the cluster
(ui/cleanup_cli.py); anything else is the extender itself: its settings from flags, environment
and file (flags.py), then app.py builds and runs it. Start-up errors are one line and exit 2."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from prometheus_client import disable_created_metrics

from gpuextender.common.logs import configure_logging
from gpuextender.common.serving_tls import TlsLoadError, serving_certificate
from gpuextender.extender.flags import ConfigError, build_config
from gpuextender.extender.inventory.files import FileInventorySource, InventoryPathError
from gpuextender.extender.settings import ExtenderConfig
from gpuextender.extender.state.claim_ledger import ClaimLedger
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.pod_ledger import PodLedger


def _fail(message: str) -> int:
    print(f"gpu-extender: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["explain"]:
        from gpuextender.extender.ui.explain_cli import main as explain_main

        return explain_main(argv[1:])
    if argv[:1] == ["cleanup"]:
        from gpuextender.extender.ui.cleanup_cli import main as cleanup_main

        return cleanup_main(argv[1:])
    if argv[:1] == ["relay"]:
        from gpuextender.extender.relay.relay_main import main as relay_main

        return relay_main(argv[1:])
    disable_created_metrics()  # *_created series only add noise to every scrape
    try:
        config = build_config(argv)
    except ConfigError as exc:
        return _fail(str(exc))
    configure_logging(config.log_level, config.log_format)
    return serve(config, argv)


def serve(config: ExtenderConfig, argv: Sequence[str] = ()) -> int:
    """Check what can be checked before the event loop (inventory path, TLS files), then run."""
    from gpuextender.extender.app import StartupError, build

    store = InventoryStore()
    ledger = PodLedger(config.api.gpu_resources)  # bound GPU pods, kept apart from the store (pod_ledger.py)
    claims = ClaimLedger()  # the devices DRA's claims hold, likewise (claim_ledger.py)
    source: FileInventorySource | None = None
    if config.inventory is not None:
        try:
            source = FileInventorySource(config.inventory, store, pods=ledger, claims=claims)
        except InventoryPathError as exc:
            return _fail(str(exc))
    try:
        certificate = serving_certificate(config.tls)
    except TlsLoadError as exc:
        return _fail(str(exc))

    async def run() -> int:
        extender = await build(config, store, ledger, source, certificate, argv, claims=claims)
        return await extender.run()

    try:
        return asyncio.run(run())
    except StartupError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot listen: {exc.strerror or exc}")


if __name__ == "__main__":
    sys.exit(main())
