"""`gpu-extender relay` between real agents and two real extender replicas: every agent's node
reaches both replicas through one stream per replica, the agents learn the replicas' idle rule
and send light heartbeats, a replica that restarts is sent every held node at once (no agent
sends anything for it), and an agent that leaves is counted out at the replicas."""

from __future__ import annotations

import re
from pathlib import Path

import grpc
import pytest

from gpuextender.extender.ingest.limits import MAX_REPORT_BYTES
from gpuextender.extender.relay.forward_store import WRAP_BYTES
from gpuextender.extender.relay.relay_app import MAX_AGENT_REPORT_BYTES
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.e2e.test_ingest_bounds import now_report, send, sized
from tests.harness import ROOT, Cluster, Proc, cluster, free_port, http, metric, scrape, url, wait_until

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
AGENTS = 3


def documented_command() -> list[str]:
    """docs/relay.md's "Run one" command, as written."""
    page = (ROOT / "docs" / "relay.md").read_text()
    (command,) = re.findall(r"```sh\n(gpu-extender relay [^\n]+)\n```", page)
    return command.split()


def relay(c: Cluster, *extenders: Proc) -> Proc:
    """docs/relay.md's command with free ports, forwarding to `extenders`."""
    grpc_port, metrics_port = free_port(), free_port()
    args = documented_command()[1:]
    assert args[:3] == ["relay", "--extender", "127.0.0.1:9090"]
    args = [a.replace(":9190", f":{grpc_port}").replace(":9191", f":{metrics_port}") for a in args[3:]]
    assert args == ["--grpc-addr", f"127.0.0.1:{grpc_port}", "--metrics-addr", f"127.0.0.1:{metrics_port}"]
    for ext in extenders:
        args += ["--extender", f"127.0.0.1:{ext.ports['grpc']}"]
    proc = c.spawn("relay", "gpuextender.extender", ["relay", *args], {"grpc": grpc_port, "metrics": metrics_port})
    wait_until(
        f"relay /metrics ({proc.log_path})",
        lambda: proc.alive() and http("GET", f"http://127.0.0.1:{metrics_port}/metrics")[0] == 200,
    )
    return proc


def at(proc: Proc, name: str, **labels: str) -> float | None:
    return metric(scrape(url(proc, "/metrics")), name, **labels)


def test_agents_reach_every_replica_through_a_relay_and_a_restarted_replica_is_whole_at_once(tmp_path: Path) -> None:
    http_port, grpc_port = free_port(), free_port()
    with cluster(tmp_path) as c:
        first = c.extender("--stale-after", "600", http_port=http_port, grpc_port=grpc_port)
        other = c.extender("--stale-after", "600", "--idle-max-utilization", "20")
        r = relay(c, first, other)
        agents = [
            c.agent(f"node-{i}", FIXTURES / "scenarios" / "idle8.yaml", r, extra=("--heartbeat", "1"))
            for i in range(AGENTS)
        ]
        for ext in (first, other):
            wait_until("every node at each replica", lambda ext=ext: at(ext, "gpu_extender_nodes_with_data") == AGENTS)
            assert at(ext, "gpu_extender_connected_agents") == AGENTS  # relayed agent streams
            assert "relay connected" in ext.log()
        assert at(r, "gpu_relay_extenders_connected") == at(r, "gpu_relay_extenders") == 2
        assert http("GET", url(r, "/readyz")) == (200, b"ready: 2 of 2 extender replica(s) found with a stream open\n")
        assert at(r, "gpu_extender_connected_agents") == AGENTS
        # The replicas disagree on the idle rule; the agents are told one of them, and both take light
        # heartbeats: the agents send them.
        target = f"127.0.0.1:{r.ports['grpc']}"
        wait_until(
            "light heartbeats through the relay",
            lambda: all((at(a, "gpu_agent_light_heartbeats_sent_total", extender=target) or 0) >= 2 for a in agents),
            timeout=30,
        )
        refused_before = at(r, "gpu_relay_refused_reports_total") or 0

        first.stop()
        wait_until("the relay to notice", lambda: at(r, "gpu_relay_extenders_connected") == 1)
        assert at(r, "gpu_relay_extenders") == 2  # still named: what GPURelayExtendersUnreached compares
        again = c.extender("--stale-after", "600", http_port=http_port, grpc_port=grpc_port)
        wait_until("the relay back at the restarted replica", lambda: at(r, "gpu_relay_extenders_connected") == 2)
        wait_until("every node at the restarted replica", lambda: at(again, "gpu_extender_nodes_with_data") == AGENTS)
        # Whole from what the relay holds: no refusal of a heartbeat whose full report it lacks.
        assert (at(r, "gpu_relay_refused_reports_total") or 0) == refused_before
        assert at(again, "gpu_extender_reports_rejected_total", reason="heartbeat") in (None, 0.0)
        assert f"relay stream to extender 127.0.0.1:{grpc_port} open: {AGENTS} node(s) to send" in r.log()

        agents[0].stop()
        for ext in (again, other):
            wait_until("the agent counted out", lambda ext=ext: at(ext, "gpu_extender_connected_agents") == AGENTS - 1)
        assert "agent for node node-0 disconnected (through relay" in other.log()


def test_the_relay_takes_reports_it_can_forward_whole_and_not_one_byte_more(tmp_path: Path) -> None:
    """Its transport bound is the extender's less what wraps a report in a RelayBatch: a report at
    the bound passes it (and is checked: this one's node_error is too long), one byte more ends
    the stream, and the relay goes on serving."""
    with cluster(tmp_path) as c:
        r = relay(c, c.extender("--readiness-grace", "0"))
        at_bound = send(r, sized(MAX_AGENT_REPORT_BYTES))
        assert at_bound[0].status == pb.ReportAck.REJECTED and "node_error is" in at_bound[0].reason
        with pytest.raises(grpc.RpcError) as over:
            send(r, sized(MAX_AGENT_REPORT_BYTES + 1))
        assert over.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
        assert [a.status for a in send(r, now_report("gpu-node-1"))] == [pb.ReportAck.ACCEPTED]
        assert MAX_AGENT_REPORT_BYTES + WRAP_BYTES == MAX_REPORT_BYTES  # the extender's own bound
