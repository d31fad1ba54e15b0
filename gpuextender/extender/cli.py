"""`gpu-extender`: the command line. `gpu-extender explain ...` asks a running extender
(ui/explain_cli.py), `gpu-extender relay ...` serves agents in front of the extenders
(relay/relay_main.py), `gpu-extender cleanup ...` removes what the extender wrote to the cluster
(ui/cleanup_cli.py); anything else is the extender itself: its settings from flags, environment
and file (flags.py), then app.py builds and runs it. Start-up errors are one line and exit 2."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gpuextender.common.program import run_program
from gpuextender.common.serving_tls import TlsLoadError, serving_certificate
from gpuextender.extender.flags import ConfigError, build_config
from gpuextender.extender.inventory.files import FileInventorySource, InventoryPathError
from gpuextender.extender.settings import ExtenderConfig
from gpuextender.extender.state.claim_ledger import ClaimLedger
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.pod_ledger import PodLedger


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
    from gpuextender.extender.app import StartupError

    return run_program(
        "gpu-extender",
        lambda: build_config(argv),
        lambda config: serve(config, argv),
        refused=(ConfigError, InventoryPathError, TlsLoadError, StartupError),
        log_settings=lambda config: (config.log_level, config.log_format),
    )


async def serve(config: ExtenderConfig, argv: Sequence[str] = ()) -> int:
    """Check what can be checked first (inventory path, TLS files), then build the extender and run it."""
    from gpuextender.extender.app import build

    store = InventoryStore()
    ledger = PodLedger(config.api.gpu_resources)  # bound GPU pods, kept apart from the store (pod_ledger.py)
    claims = ClaimLedger()  # the devices DRA's claims hold, likewise (claim_ledger.py)
    source = (
        FileInventorySource(config.inventory, store, pods=ledger, claims=claims)
        if config.inventory is not None
        else None
    )
    certificate = serving_certificate(config.tls)
    extender = await build(config, store, ledger, source, certificate, argv, claims=claims)
    return await extender.run()


if __name__ == "__main__":
    sys.exit(main())
