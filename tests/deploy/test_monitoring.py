"""deploy/components/monitoring: the PodMonitor and ServiceMonitor (CRD kinds, so not covered by
kubernetes-validate) select the right pods/Service and ports, and scrape HTTPS correctly."""

from __future__ import annotations

from tests.deploy import manifests as m


def monitors() -> list[m.KubeObject]:
    return m.load_source(m.COMPONENTS / "monitoring")


def test_podmonitor_scrapes_the_agents_metrics_port(base_objects: list[m.KubeObject]) -> None:
    pm = m.one(monitors(), "PodMonitor", "gpu-agent", m.NAMESPACE)
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    ds = m.one(base_objects, "DaemonSet", "gpu-agent", m.NAMESPACE)
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pm["spec"]["namespaceSelector"]["matchNames"] == [m.NAMESPACE]
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    ports = {p["name"] for p in ds["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert endpoint["port"] in ports and endpoint["path"] == "/metrics"


def test_servicemonitor_scrapes_the_extender_over_verified_https(base_objects: list[m.KubeObject]) -> None:
    sm = m.one(monitors(), "ServiceMonitor", "gpu-extender", m.NAMESPACE)
    selected = [
        s
        for s in m.find(base_objects, "Service", namespace=m.NAMESPACE)
        if sm["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    assert [s["metadata"]["name"] for s in selected] == ["gpu-extender"]
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in selected[0]["spec"]["ports"]}
    assert endpoint["scheme"] == "https" and endpoint["path"] == "/metrics"
    tls = endpoint["tlsConfig"]
    assert "insecureSkipVerify" not in tls
    assert tls["ca"]["secret"] == {"name": "gpu-extender-tls", "key": "ca.crt"}
    assert tls["serverName"] in m.service_dns_names(selected[0])


def test_relay_podmonitor_scrapes_only_the_relays_metrics_port(base_objects: list[m.KubeObject]) -> None:
    """components/relay's pods, and no other: the agents' PodMonitor must not take them either."""
    relay_objects = m.load_yaml_docs(m.COMPONENTS / "relay" / "relay.yaml")
    pm = m.one(monitors(), "PodMonitor", "gpu-relay", m.NAMESPACE)
    agents_pm = m.one(monitors(), "PodMonitor", "gpu-agent", m.NAMESPACE)
    selected = {
        monitor["metadata"]["name"]: [
            w["metadata"]["name"]
            for w in [*base_objects, *relay_objects]
            if w["kind"] in ("Deployment", "DaemonSet")
            and monitor["spec"]["selector"]["matchLabels"].items()
            <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        for monitor in (pm, agents_pm)
    }
    assert selected == {"gpu-relay": ["gpu-relay"], "gpu-agent": ["gpu-agent"]}
    assert pm["spec"]["namespaceSelector"]["matchNames"] == [m.NAMESPACE]
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    relay = m.one(relay_objects, "Deployment", "gpu-relay", m.NAMESPACE)
    (container,) = relay["spec"]["template"]["spec"]["containers"]
    port = next(p for p in container["ports"] if p["name"] == endpoint["port"])
    assert endpoint["path"] == "/metrics" and "scheme" not in endpoint  # plain HTTP, as the relay serves it
    assert f"--metrics-addr=0.0.0.0:{port['containerPort']}" in container["args"]
