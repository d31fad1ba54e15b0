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
