"""`gpu-extender cleanup`: remove what gpu-extender wrote to the cluster, after uninstalling it.

    gpu-extender cleanup [--kubeconfig PATH] [--context NAME] [--node-taint-key KEY] [--dry-run]

What is removed and how: gpuextender/extender/inventory/cleanup.py (the I/O) and
gpuextender/extender/state/cleanup_plan.py (what to remove, what is said).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from gpuextender.common.cli import HelpFormatter, add_version
from gpuextender.extender.settings import DEFAULT_NODE_TAINT_KEY, TAINT_KEY_FORM, is_taint_key
from gpuextender.extender.state.cleanup_plan import CleanupReport, exit_status, lines
from gpuextender.extender.state.device_taints import LEASE_NAME, MANAGED_BY
from gpuextender.extender.state.node_gpu_status import CONDITION_TYPE

PROG = "gpu-extender cleanup"
DEFAULT_NAMESPACE = "gpu-extender"  # deploy/: the extender's namespace, where its Lease lives
DEFAULT_TIMEOUT_S = 120.0

EPILOG = f"""\
what is removed (nothing else is touched):
  - every DeviceTaintRule (resource.k8s.io, whichever version the API server serves) labelled
    {"=".join(MANAGED_BY)}: the extender's rules gpu-extender.<node>.<device>
    (unhealthy or degraded GPUs) and gpu-extender-busy.<node>.<device> (busy outside Kubernetes);
  - the {CONDITION_TYPE} condition of every Node (a strategic-merge patch of nodes/status: no
    other condition is touched);
  - the --node-taint-key taint of every Node (a JSON patch that tests each taint is still as read,
    so a concurrent change to the Node's taints is never lost; no other taint is touched).

Run it after the extender is gone (kubectl delete -k deploy/): a running leader writes them again
within a second. It says so when a replica still holds the Lease
{DEFAULT_NAMESPACE}/{LEASE_NAME}. Running it again finds nothing (0 of each).

kubeconfig: --kubeconfig, else in-cluster when running in a pod, else $KUBECONFIG, else
~/.kube/config (as `gpu-extender explain --pod`). It needs list and delete on devicetaintrules,
list, get and patch on nodes, patch on nodes/status, and get on the Lease (a cluster admin has
them); a refusal is said as the verb and resource RBAC must allow.

One line per kind, with its counts (`would ...` with --dry-run). Exit status: 0 everything found
was removed, 1 something was not (or a running extender holds the Lease), 2 a usage or kubeconfig
error.
"""


class _Formatter(argparse.RawDescriptionHelpFormatter, HelpFormatter):
    """Keeps the epilog's layout; shows meaningful defaults."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n\n")[0], epilog=EPILOG, formatter_class=_Formatter
    )
    add_version(p)
    p.add_argument("--kubeconfig", metavar="PATH", help="an admin's kubeconfig (default: see below)")
    p.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    p.add_argument(
        "--node-taint-key",
        default=DEFAULT_NODE_TAINT_KEY,
        metavar="KEY",
        help="the node taint's key, as the extender's --node-taint-key",
    )
    p.add_argument(
        "--leader-namespace",
        default=DEFAULT_NAMESPACE,
        metavar="NAMESPACE",
        help="the extender's namespace, where the replicas' Lease is (as its --leader-namespace)",
    )
    p.add_argument("--dry-run", action="store_true", help="count what would be removed; remove nothing")
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="give up after this long (what was removed until then is said)",
    )
    return p


def _fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not is_taint_key(args.node_taint_key):
        parser.error(f"--node-taint-key {args.node_taint_key!r} is not a taint key ({TAINT_KEY_FORM})")
    if not args.timeout > 0:  # also refuses NaN
        parser.error(f"--timeout {args.timeout:g} must be a positive number of seconds")
    report = CleanupReport(args.node_taint_key, dry_run=args.dry_run)
    problem = asyncio.run(_run(args, report))
    if problem:
        return _fail(problem)
    for line in lines(report):
        print(f"cleanup: {line}")
    return exit_status(report)


async def _run(args: argparse.Namespace, report: CleanupReport) -> str:
    """Fill `report`; a usage or kubeconfig problem instead (one line)."""
    from gpuextender.extender.inventory.cleanup import CleanupError, clean_up
    from gpuextender.extender.kube.connection import KubeConfigError, load_kube_config

    try:
        configuration = await load_kube_config(args.kubeconfig, context=args.context)
    except KubeConfigError as exc:
        return str(exc)
    try:
        await asyncio.wait_for(clean_up(configuration, report, lease_namespace=args.leader_namespace), args.timeout)
    except CleanupError as exc:
        return str(exc)
    except TimeoutError:
        report.stopped = f"out of time after {args.timeout:g}s (--timeout): the API server answered too slowly"
    return ""
