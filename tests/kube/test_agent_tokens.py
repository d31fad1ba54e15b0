"""`--agent-auth tokenreview` against the real apiserver: agents send ServiceAccount tokens that the
apiserver issued bound to a pod on their node (what a projected token volume of the DaemonSet's
pod holds), and the extender asks the real TokenReview API who they are."""

from __future__ import annotations

from tests.harness import metric, wait_until, write_pem
from tests.kube.scene import H100, Scene

AUDIENCE = "gpu-extender"  # the extender's default --agent-token-audience


def node_bound_token(world: Scene, node: str) -> str:
    """A token of the gpu-agent ServiceAccount bound to a pod running on `node`: the apiserver adds the
    node's name to its claims, and TokenReview returns it in user.extra."""
    pod = world.kube.create(
        f"/api/v1/namespaces/{world.ns}/pods",
        {
            "metadata": {"name": f"gpu-agent-{node}"[:63]},
            "spec": {
                "nodeName": node,
                "serviceAccountName": "gpu-agent",
                "containers": [{"name": "agent", "image": "registry.example/gpu-agent:1"}],
            },
        },
    )
    answer = world.kube.create(
        f"/api/v1/namespaces/{world.ns}/serviceaccounts/gpu-agent/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [AUDIENCE],
                "expirationSeconds": 3600,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod["metadata"]["name"],
                    "uid": pod["metadata"]["uid"],
                },
            },
        },
    )
    return str(answer["status"]["token"])


def test_a_token_bound_to_the_agents_node_streams_and_one_bound_to_another_node_is_refused(world: Scene) -> None:
    world.kube.create(f"/api/v1/namespaces/{world.ns}/serviceaccounts", {"metadata": {"name": "gpu-agent"}})
    own, other = world.node("own", H100, 8), world.node("other", H100, 8)
    token = write_pem(world.workdir / "token", node_bound_token(world, own).encode())
    ext = world.extender("--agent-auth", "tokenreview", "--agent-service-account", f"{world.ns}/gpu-agent")
    world.agent(own, ext, "--token-file", str(token))
    # `other`'s agent holds a token bound to `own` (a stolen or mis-mounted one).
    stolen = world.agent(other, ext, "--token-file", str(token))
    world.wait_idle(ext, own, 8)
    wait_until(
        "the other node's agent refused",
        lambda: (metric(world.scrape(ext), "gpu_extender_agent_auth_failures_total", reason="node_mismatch") or 0) >= 1,
    )
    samples = world.scrape(ext)
    assert metric(samples, "gpu_extender_node_idle_gpus", node=other) is None
    assert metric(samples, "gpu_extender_nodes_with_data") == 1
    assert "an agent may only report for its own node" in stolen.log()
    log = next(p for p in world.procs.procs if p.name == "extender").log()
    assert f"agent for node {own} connected" in log and f"system:serviceaccount:{world.ns}:gpu-agent" in log
    # A GPU pod then lands on the node whose agent proved who it is.
    world.scheduler(ext)
    assert world.bound(world.pod("gpu", 6)) == own
