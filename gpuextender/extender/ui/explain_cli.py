"""`gpu-extender explain`: ask a running extender why it would place a pod where it would.

    gpu-extender explain --pod NAMESPACE/NAME [--kubeconfig PATH] [--context NAME] [--url URL]
    gpu-extender explain POD.yaml [--url URL]          # a Pod manifest: every node the extender knows
    gpu-extender explain REQUEST.json [--url URL]      # an ExtenderArgs body, as kube-scheduler posts it

The answer comes from the extender's `POST /explain`; the rows are sorted best first (passing
nodes by score, then failing nodes with their reason). Where the question comes from:
`gpuextender/extender/ui/explain_lookup.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from gpuextender.common.cli import HelpFormatter, add_version
from gpuextender.common.idle_rule import JUDGED_BY_SM_ACTIVE, JUDGED_BY_UTILIZATION
from gpuextender.extender.ui.explain_lookup import (
    ClusterCandidates,
    SourceError,
    candidate_nodes,
    question_from_file,
    read_cluster,
    split_pod_ref,
)

PROG = "gpu-extender explain"
TLS_SECRET, TLS_NAMESPACE = "gpu-extender-tls", "gpu-extender"  # deploy/components/cert-manager/certificates.yaml
CA_COMMAND = f"kubectl -n {TLS_NAMESPACE} get secret {TLS_SECRET} -o jsonpath='{{.data.ca\\.crt}}' | base64 -d > ca.crt"
HOSTNAME_MISMATCH = 62  # X509_V_ERR_HOSTNAME_MISMATCH

EPILOG = f"""\
where the pod comes from:
  --pod NS/NAME     a pod in the cluster (kubeconfig: --kubeconfig, else in-cluster when running
                    in a pod, else $KUBECONFIG, else ~/.kube/config). The candidates are the
                    cluster's Nodes as kube-scheduler (nodeCacheCapable: true) would pass them:
                    cordoned nodes (spec.unschedulable) are left out unless the pod tolerates
                    node.kubernetes.io/unschedulable, and so are nodes missing a label of the
                    pod's nodeSelector. Other kube-scheduler filters (affinity, taints, free
                    CPU/memory) are not replayed: those nodes are explained too. --all-nodes
                    sends every node.
  POD.yaml          a Pod manifest (YAML or JSON, one document, kind: Pod), e.g. a pod template
                    written as a Pod. Sent without candidates: the extender explains every node
                    it knows. The cluster is not contacted unless --kubeconfig or --context is
                    given; then the cluster's nodes are the candidates, chosen as for --pod.
  REQUEST.json      an ExtenderArgs body (Pod + NodeNames or Nodes), sent unchanged; - reads stdin.

TLS: an https:// extender is verified with --cacert. In a cluster its CA is ca.crt of the
{TLS_SECRET} Secret:
  {CA_COMMAND}
  kubectl -n {TLS_NAMESPACE} port-forward deploy/gpu-extender 8888:8888 &
  gpu-extender explain --pod llm/my-pod --url https://127.0.0.1:8888 --cacert ca.crt

Exit status: 0 answered, 1 the extender refused the request, 2 the question could not be asked.
"""


class _Formatter(argparse.RawDescriptionHelpFormatter, HelpFormatter):
    """Keeps the epilog's layout; shows meaningful defaults."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n\n")[0], epilog=EPILOG, formatter_class=_Formatter
    )
    add_version(p)
    p.add_argument(
        "request",
        nargs="?",
        metavar="FILE",
        help="a Pod manifest (YAML/JSON) or an ExtenderArgs JSON body; - for stdin",
    )
    p.add_argument("--pod", metavar="NAMESPACE/NAME", help="explain this pod of the cluster (instead of FILE)")
    p.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig for --pod (default: see below)")
    p.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    p.add_argument(
        "--all-nodes",
        action="store_true",
        help="with --pod: send every node, cordoned and nodeSelector-mismatched ones too",
    )
    p.add_argument(
        "-n", "--namespace", default="default", help="namespace of a Pod manifest without metadata.namespace"
    )
    p.add_argument("--url", default="http://127.0.0.1:8888", help="the extender's HTTP address (and path prefix)")
    p.add_argument(
        "--cacert",
        metavar="PATH",
        help="CA certificate to verify an https:// extender with (the issuer of its --tls-cert; "
        f"in a cluster ca.crt of the {TLS_SECRET} Secret)",
    )
    p.add_argument("--json", action="store_true", help="print the raw /explain answer")
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="for each request to the extender and to the API server",
    )
    return p


def _fail(message: str, *hints: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    for hint in hints:
        print(f"hint: {hint}", file=sys.stderr)
    return 2


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.request is None) == (args.pod is None):
        parser.error("give either FILE or --pod NAMESPACE/NAME")
    try:
        body, candidates, note = _question(args)
    except SourceError as exc:
        return _fail(str(exc))
    try:
        context = ssl.create_default_context(cafile=args.cacert) if args.cacert else None
    except (OSError, ssl.SSLError) as exc:
        return _fail(f"--cacert {args.cacert}: {exc}")
    url = args.url.rstrip("/") + "/explain"
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=args.timeout, context=context) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")
        try:
            detail = json.loads(detail).get("error", detail)
        except (ValueError, AttributeError):
            pass
        print(f"{PROG}: {url} answered {exc.code}: {detail}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, ssl.SSLCertVerificationError):
            return _fail(f"cannot verify {url}: {reason.verify_message or reason}", tls_hint(reason, args.cacert))
        return _fail(f"cannot reach {url}: {reason}")
    except ValueError:
        return _fail(f"{url} answered something that is not JSON (is --url the extender?)")
    if args.json:
        print(json.dumps(answer, indent=2))
        return 0
    if candidates is not None:
        answer["candidates"] = candidates.describe()
    if note:
        answer["note"] = note
    print(render(answer))
    return 0


def _question(args: argparse.Namespace) -> tuple[bytes, ClusterCandidates | None, str | None]:
    """The /explain body; with the cluster asked, the candidates chosen and a note on the pod."""
    pod: dict[str, Any] | None = None
    if args.pod is None:
        what = "standard input" if args.request == "-" else args.request
        try:
            raw = sys.stdin.buffer.read() if args.request == "-" else open(args.request, "rb").read()
        except OSError as exc:
            raise SourceError(f"cannot read {args.request}: {exc.strerror}") from None
        question = question_from_file(raw, what, args.namespace)
        if question.pod is None:
            if args.kubeconfig or args.context or args.all_nodes:
                raise SourceError(
                    f"{what} is an ExtenderArgs body: it names its own candidates, so --kubeconfig/"
                    "--context/--all-nodes do not apply (give a Pod manifest or --pod)"
                )
            return question.body, None, None
        if not (args.kubeconfig or args.context):
            if args.all_nodes:
                raise SourceError("--all-nodes needs the cluster: give --pod, or --kubeconfig with a manifest")
            return question.body, None, None  # the extender explains every node it knows
        pod = question.pod
    ref = split_pod_ref(args.pod) if args.pod is not None else None
    cluster = asyncio.run(read_cluster(ref, kubeconfig=args.kubeconfig, context=args.context, timeout=args.timeout))
    if cluster.pod is not None:
        pod = cluster.pod
    assert pod is not None
    candidates = candidate_nodes(pod, cluster.nodes, every=args.all_nodes)
    bound = (pod.get("spec") or {}).get("nodeName")
    note = f"the pod is already bound to {bound}: this is what the extender would decide now" if bound else None
    return json.dumps({"Pod": pod, "NodeNames": candidates.names}).encode(), candidates, note


def tls_hint(error: ssl.SSLCertVerificationError, cacert: str | None) -> str:
    """What to do when the extender's certificate cannot be verified."""
    if error.verify_code == HOSTNAME_MISMATCH:
        return (
            "the extender's certificate does not name the host in --url: use a name it carries (in a "
            f"cluster the {TLS_SECRET} certificate names gpu-extender.{TLS_NAMESPACE}.svc, localhost and "
            "127.0.0.1, e.g. through kubectl port-forward)"
        )
    which = f"--cacert {cacert} did not sign the extender's certificate; pass" if cacert else "pass --cacert with"
    return (
        f"{which} the CA that signed the extender's certificate (in a cluster: ca.crt of the {TLS_SECRET} "
        f"Secret: {CA_COMMAND})"
    )


def ordered(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Best first: passing nodes by score (highest first), then failing nodes, each group by name."""
    return sorted(nodes, key=lambda n: (n["result"] != "pass", -(n.get("score") or 0), n["node"]))


def _result(n: dict[str, Any]) -> str:
    if n["result"] == "pass":
        return "pass (not in filter's shortlist)" if n.get("shortlisted") is False else "pass"
    return f"FAIL {n['reasonCode']}: {n['reason']}" if n.get("reason") else f"FAIL {n['reasonCode']}"


def render(answer: dict[str, Any]) -> str:
    lines = [f"pod {answer['pod']} needs {answer['gpusNeeded']} GPU(s)"]
    if answer.get("note"):
        lines.append(f"  note: {answer['note']}")
    for key, value in answer["resolved"].items():
        if key == "claims":
            lines += [f"  claim {_claim_line(c)}" for c in value]
        else:
            lines.append(f"  {key}: {', '.join(value) if isinstance(value, list) else value}")
    ranking = answer.get("classRanking")
    if ranking:
        ranked = "; ".join(f"{i + 1}. {r['class']} ({r['basis']})" for i, r in enumerate(ranking["ranked"]))
        lines.append(f"  class ranking ({ranking['policy']}): {ranked or 'none'}")
        for e in ranking["excluded"]:
            lines.append(f"    excluded {e['class']}: {e['stage']}: {e['reason']}")
        lines.append(f"  OME alone would choose: {ranking['omeWouldChoose'] or 'none'}")
    group = answer.get("group")
    if group:
        lines += [f"  {line}" for line in group_lines(group)]
    candidates = answer.get("candidates")
    if candidates:
        lines.append(f"  candidates: {_candidates(candidates)}")
    if answer["fallback"]:
        lines.append("  no node fits: busy/stale nodes pass, kube-scheduler decides")
    preempting = (answer.get("preemption") or {}).get("nodesWithLowerPriorityGPUPods")
    if preempting:
        lines.append(
            f"  no node fits: kube-scheduler may preempt lower-priority GPU pods on {preempting} node(s)"
            " (the busy/stale ones do not pass)"
        )
    last = (answer.get("preemption") or {}).get("lastCall")
    if last:
        lines += preemption_lines(last)
    whole = answer.get("inWholeDomains")
    if whole:
        shown = ", ".join(whole[:5]) + (f" and {len(whole) - 5} more" if len(whole) > 5 else "")
        lines.append(f"  ranked last, their domain whole (every GPU idle) and kept for multi-pod groups: {shown}")
    if answer.get("passedOnAssumedData"):
        lines.append("  no node with fresh GPU data fits: nodes without it pass on assumed data (marked *)")
    rows = ordered(answer["nodes"])
    node_w = max([20, *(len(n["node"]) for n in rows)])
    class_w = max([22, *(len(",".join(n["classes"])) for n in rows)])
    header = (
        f"{'NODE':<{node_w}} {'CLASSES':<{class_w}} {'DATA':<6} {'IDLE/HEALTHY/GPUS':>17} {'UTIL':>5} "
        f"{'RANK':>4} {'SCORE':>5}  RESULT"
    )
    lines += ["", header]
    if not rows:
        lines.append("(no candidate nodes)")
    for n in rows:
        gpus = "/".join("?" if v is None else str(v) for v in (n["idleGpus"], n["healthyGpus"], n["gpus"]))
        if n.get("assumedData"):
            gpus = "*" + gpus  # assumed: idle = needed, not measured
        util = "-" if n["meanUtilization"] is None else f"{n['meanUtilization']:.0f}%"
        rank = "-" if n["classRank"] is None else str(n["classRank"] + 1)
        lines.append(
            f"{n['node']:<{node_w}} {','.join(n['classes']) or '-':<{class_w}} {n['data']:<6} {gpus:>17} "
            f"{util:>5} {rank:>4} {n['score']:>5}  {_result(n)}"
        )
        judged = _judged_line(n.get("gpuIdleRule"))
        if judged:
            lines.append(f"  {judged}")
        for cls, why in (n.get("classesExcludedByGpus") or {}).items():
            lines.append(f"  not in {cls} although its labels match: {why}")
        if n.get("boundPodsPending"):
            pods = ", ".join(
                f"{b['pod']} ({b['gpus']} GPU, {b['phase'] or 'no phase'}, {b['ageSeconds']:.0f}s)"
                for b in n["boundPodsPending"]
            )
            lines.append(
                f"  bound here, not yet attributed by the agent ({n['boundPodsPendingGpus']} GPU taken off): {pods}"
            )
        if n.get("draDevices"):
            lines.append(f"  {_dra_line(n['draDevices'])}")
        if n.get("draMigDevices"):
            lines.append(f"  {_dra_mig_line(n['draMigDevices'])}")
        if n.get("published"):
            lines += [f"  {line}" for line in _published_lines(n["published"])]
    lines += ["", f"node score: {answer['formulas']['node']}"]
    if any(n.get("assumedData") for n in answer["nodes"]):
        lines.append("* assumed data (no fresh agent report): idle GPUs counted as just enough, never as all idle")
    if answer["formulas"]["class"]:
        lines.append(f"with classes: {answer['formulas']['class']}")
    return "\n".join(lines)


def _judged_line(rules: list[dict[str, Any]] | None) -> str | None:
    """Which reading judged each GPU, said only where SM activity judged one (else utilization did)."""
    by_sm = [r for r in rules or () if r["judgedBy"] == JUDGED_BY_SM_ACTIVE]
    if not by_sm:
        return None
    line = "idle judged by SM activity on GPU " + ", ".join(f"{r['gpu']} ({r['smActivePercent']:g} %)" for r in by_sm)
    by_util = [str(r["gpu"]) for r in rules or () if r["judgedBy"] == JUDGED_BY_UTILIZATION]
    return line + (f"; by utilization on GPU {', '.join(by_util)}" if by_util else "")


def group_lines(g: dict[str, Any]) -> list[str]:
    """A multi-pod group member's group: what it is, where it goes and why, the hold."""
    if "problem" in g:
        return [f"group: {g['problem']}"]
    lines = [
        f"group {g['key']} ({g['source']}): {g['size']} members of {g['gpusPerMember']} GPU(s), "
        f"{g['boundMembers']} bound; domains by {', '.join(g['levels'])}"
    ]
    composite = g.get("composite")
    if composite:
        where = composite.get("otherRoleIn")
        lines.append(
            f"  {composite['role']} of InferenceService {composite['inferenceService']}: "
            + (f"placed in the block of its other role, {where}" if where else "its other role is not placed yet")
        )
    if g.get("domain"):
        lines.append(f"  domain {g['domain']}" + (f": {g['why']}" if g.get("why") else ""))
    if g.get("reason"):
        lines.append(f"  waits: {g['reason']}")
    if g.get("held"):
        held = ", ".join(f"{node} x{n}" for node, n in sorted(g["held"].items()))
        lines.append(f"  held for members not yet bound: {held} (released in {g['holdExpiresInSeconds']:.0f}s)")
    rooms = "; ".join(f"{r['domain']} room {r['members']}" for r in g.get("rooms", []))
    if rooms:
        lines.append(f"  domains ({g['domainsConsidered']}): {rooms}")
    lines += [f"  note: {note}" for note in g.get("notes", [])]
    return lines


def _candidates(c: dict[str, Any]) -> str:
    known, explained = c.get("known"), c.get("explained")
    text = f"{c.get('source', '?')}: {explained} of {known} explained"
    if isinstance(known, int) and isinstance(explained, int) and explained < known and not c.get("skipped"):
        text += f" (the first {explained} by name: /explain takes at most that many)"
    skipped = c.get("skipped") or {}
    if skipped:
        text += " (left out: " + ", ".join(f"{count} {why}" for why, count in skipped.items()) + ")"
    return text


def _claim_line(c: dict[str, Any]) -> str:
    """One of the pod's claims: what was read of each of its requests."""
    requests = "; ".join(f"{r['request']}: {r['read']}" for r in c["requests"])
    if not requests:
        requests = "asks for nothing more (its devices are held)" if c["state"] == "allocated" else "demand unknown"
    return f"{c['claim']} ({c['state']}): {requests}"


def _dra_mig_line(devices: list[dict[str, Any]]) -> str:
    """One line for a node's DRA MIG devices: per profile, how many no claim holds and no taint blocks."""
    per: dict[str, list[int]] = {}
    for d in devices:
        counts = per.setdefault(str(d["profile"]), [0, 0])
        counts[0] += 1
        counts[1] += bool(d["allocatable"])
    return "DRA MIG devices: " + ", ".join(f"{p} {free} of {n} free" for p, (n, free) in sorted(per.items()))


def _published_lines(published: dict[str, Any]) -> list[str]:
    """What other schedulers and autoscalers see of the node: its taint rules and its condition."""
    lines = []
    for t in published.get("deviceTaints") or ():
        pending = t.get("pendingForSeconds")
        if t["stands"]:
            state = "stands" + (
                f" (no longer asked for, {pending:g}s; goes at the hold)" if pending is not None else ""
            )
        else:
            state = f"pending: asked for {pending:g}s, written at the hold" if pending is not None else "pending"
        lines.append(f"published taint on {t['device']}: {t['taint']} {state}")
    usable = published.get("gpusUsable")
    if usable:
        taint = "; no usable GPU: the node taint is wanted (with --node-taint on)" if usable["noUsableGpu"] else ""
        lines.append(f"condition GPUsUsable={usable['status']} ({usable['reason']}): {usable['message']}{taint}")
    return lines


def _dra_line(devices: list[dict[str, Any]]) -> str:
    """One line for a node's DRA GPUs: how many a pod could be given, and why the others cannot."""
    free = sum(1 for d in devices if d["allocatable"])
    held = [f"{d['device']} ({d['claim']})" for d in devices if d["claim"]]
    tainted = [f"{d['device']} ({'; '.join(d['taints'])})" for d in devices if d["taints"]]
    # Free in DRA, yet not usable per the agent: busy outside Kubernetes, unhealthy, or unknown.
    unusable = [
        f"{d['device']} ({d.get('agent') or 'no agent reading'})"
        for d in devices
        if d["allocatable"] and d.get("agent") not in ("free, idle", "degraded")
    ]
    parts = [f"DRA GPUs: {len(devices)}, {free} free"]
    if held:
        parts.append("held by claims: " + ", ".join(held))
    if tainted:
        parts.append("tainted: " + ", ".join(tainted))
    if unusable:
        parts.append("free but not usable: " + ", ".join(unusable))
    return "; ".join(parts)


def preemption_lines(last: dict[str, Any]) -> list[str]:
    """The pod's latest preempt call: kube-scheduler's candidates and what became of each."""
    lines = [f"  preemption {last['secondsAgo']:g}s ago: {len(last['candidates'])} candidate(s) from kube-scheduler"]
    if last.get("note"):
        lines.append(f"    {last['note']}")
    for c in last["candidates"]:
        added = f", added {', '.join(c['added'])}" if c["added"] else ""
        lines.append(f"    {c['node']}: {c['action']} ({c['why']}); {len(c['victims'])} victim(s){added}")
    return lines
