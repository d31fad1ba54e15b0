"""`gpu-extender explain`: ask a running extender why it would place a pod where it would.

    gpu-extender explain REQUEST.json [--url http://127.0.0.1:8888] [--cacert CA.crt] [--json]

REQUEST.json is an ExtenderArgs body as kube-scheduler sends it (for example one
captured from the scheduler, or tests/fixtures/extender-requests/*.json); `-`
reads it from standard input. The answer comes from `POST /explain`.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from gpuextender.common.cli import HelpFormatter


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu-extender explain", description=__doc__.split("\n\n")[0],
                                formatter_class=HelpFormatter)  # fmt: skip
    p.add_argument("request", help="ExtenderArgs JSON file (as kube-scheduler posts to /filter), or - for stdin")
    p.add_argument("--url", default="http://127.0.0.1:8888", help="the extender's HTTP address (and path prefix)")
    p.add_argument("--cacert", metavar="PATH",
                   help="CA certificate to verify an https:// extender with (the extender's --tls-cert issuer)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the raw /explain answer")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS")
    return p


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        body = sys.stdin.buffer.read() if args.request == "-" else open(args.request, "rb").read()
    except OSError as exc:
        print(f"gpu-extender explain: cannot read {args.request}: {exc.strerror}", file=sys.stderr)
        return 2
    url = args.url.rstrip("/") + "/explain"
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        context = ssl.create_default_context(cafile=args.cacert) if args.cacert else None
    except (OSError, ssl.SSLError) as exc:
        print(f"gpu-extender explain: --cacert {args.cacert}: {exc}", file=sys.stderr)
        return 2
    try:
        with urllib.request.urlopen(request, timeout=args.timeout, context=context) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")
        try:
            detail = json.loads(detail).get("error", detail)
        except (ValueError, AttributeError):
            pass
        print(f"gpu-extender explain: {url} answered {exc.code}: {detail}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"gpu-extender explain: cannot reach {url}: {reason}", file=sys.stderr)
        return 2
    print(json.dumps(answer, indent=2) if args.json else render(answer))
    return 0


def render(answer: dict[str, Any]) -> str:
    lines = [f"pod {answer['pod']} needs {answer['gpusNeeded']} GPU(s)"]
    for key, value in answer["resolved"].items():
        lines.append(f"  {key}: {', '.join(value) if isinstance(value, list) else value}")
    ranking = answer.get("classRanking")
    if ranking:
        ranked = "; ".join(f"{i + 1}. {r['class']} ({r['basis']})" for i, r in enumerate(ranking["ranked"]))
        lines.append(f"  class ranking ({ranking['policy']}): {ranked or 'none'}")
        for e in ranking["excluded"]:
            lines.append(f"    excluded {e['class']}: {e['stage']}: {e['reason']}")
        lines.append(f"  OME alone would choose: {ranking['omeWouldChoose'] or 'none'}")
    if answer["fallback"]:
        lines.append("  no node fits: busy/stale nodes pass, kube-scheduler decides")
    if answer.get("passedOnAssumedData"):
        lines.append("  no node with fresh GPU data fits: nodes without it pass on assumed data (marked *)")
    header = f"{'NODE':<20} {'CLASSES':<22} {'DATA':<6} {'IDLE/HEALTHY/GPUS':>17} {'UTIL':>5}  {'RESULT':<40} {'RANK':>4} {'SCORE':>5}"
    lines += ["", header]
    for n in answer["nodes"]:
        gpus = "/".join("?" if v is None else str(v) for v in (n["idleGpus"], n["healthyGpus"], n["gpus"]))
        if n.get("assumedData"):
            gpus = "*" + gpus  # assumed: idle = needed, not measured
        util = "-" if n["meanUtilization"] is None else f"{n['meanUtilization']:.0f}%"
        result = "pass" if n["result"] == "pass" else f"FAIL {n['reasonCode']}"
        rank = "-" if n["classRank"] is None else str(n["classRank"] + 1)
        lines.append(f"{n['node']:<20} {','.join(n['classes']) or '-':<22} {n['data']:<6} {gpus:>17} {util:>5}  "
                     f"{result:<40} {rank:>4} {n['score']:>5}")  # fmt: skip
        for cls, why in (n.get("classesExcludedByGpus") or {}).items():
            lines.append(f"  not in {cls} although its labels match: {why}")
    lines += ["", f"node score: {answer['formulas']['node']}"]
    if any(n.get("assumedData") for n in answer["nodes"]):
        lines.append("* assumed data (no fresh agent report): idle GPUs counted as just enough, never as all idle")
    if answer["formulas"]["class"]:
        lines.append(f"with classes: {answer['formulas']['class']}")
    return "\n".join(lines)
