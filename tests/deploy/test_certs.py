"""TLS material: deploy/tls/make-certs.sh (run for real, in tmp_path) and the cert-manager
component must produce the same two Secrets, with names the base mounts, SANs covering both
Services, the right key usages, and certificates that chain to the CA."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import stat
import subprocess
import threading
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.deploy import manifests as m

SCRIPT = m.DEPLOY / "tls" / "make-certs.sh"
OPENSSL = shutil.which("openssl")
needs_openssl = pytest.mark.skipif(OPENSSL is None, reason="openssl is not installed: make-certs.sh needs it")
SECRETS = ("gpu-extender-tls", "gpu-agent-tls")


LOOPBACK_NAME, LOOPBACK_IP = "localhost", "127.0.0.1"  # explain through kubectl port-forward


def expected_server_names(base_objects: list[m.KubeObject]) -> set[str]:
    """Every DNS form of every Service the extender is reached through, plus localhost."""
    names = {LOOPBACK_NAME}
    for svc in m.find(base_objects, "Service", namespace=m.NAMESPACE):
        names |= m.service_dns_names(svc)
    return names


def run_script(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"make-certs.sh failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def load_cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def eku(cert: x509.Certificate) -> list:
    return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def openssl_verify(ca: Path, leaf: Path) -> subprocess.CompletedProcess:
    return subprocess.run([OPENSSL, "verify", "-CAfile", str(ca), str(leaf)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if OPENSSL is None:
        pytest.skip("openssl is not installed: make-certs.sh needs it")
    out = tmp_path_factory.mktemp("certs") / "out"
    run_script("-o", str(out))
    return out


@needs_openssl
def test_script_writes_one_directory_per_secret(certs: Path) -> None:
    for secret in SECRETS:
        assert sorted(p.name for p in (certs / secret).iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
        assert (certs / secret / "ca.crt").read_bytes() == (certs / "ca.crt").read_bytes()
        assert stat.S_IMODE(os.stat(certs / secret / "tls.key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(certs / "ca.key").st_mode) == 0o600


@needs_openssl
def test_ca_is_a_ca(certs: Path) -> None:
    ca = load_cert(certs / "ca.crt")
    bc = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign


@needs_openssl
def test_extender_certificate_serves_both_services(certs: Path, base_objects: list[m.KubeObject]) -> None:
    cert = load_cert(certs / "gpu-extender-tls" / "tls.crt")
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == expected_server_names(base_objects)
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == [LOOPBACK_IP]
    assert eku(cert) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature


@needs_openssl
def test_agent_certificate_is_a_client_certificate(certs: Path) -> None:
    cert = load_cert(certs / "gpu-agent-tls" / "tls.crt")
    assert eku(cert) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


@needs_openssl
@pytest.mark.parametrize("secret", SECRETS)
def test_leaf_chains_to_the_ca_and_matches_its_key(certs: Path, secret: str) -> None:
    leaf = load_cert(certs / secret / "tls.crt")
    ca = load_cert(certs / "ca.crt")
    leaf.verify_directly_issued_by(ca)
    proc = openssl_verify(certs / "ca.crt", certs / secret / "tls.crt")
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stdout + proc.stderr
    key = serialization.load_pem_private_key((certs / secret / "tls.key").read_bytes(), password=None)
    assert key.public_key().public_numbers() == leaf.public_key().public_numbers()


@needs_openssl
def test_rerun_keeps_the_ca_and_new_ca_replaces_it(certs: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(certs, out)
    run_script("-o", str(out))
    assert (out / "ca.crt").read_bytes() == (certs / "ca.crt").read_bytes()
    renewed = load_cert(out / "gpu-extender-tls" / "tls.crt")
    assert renewed.serial_number != load_cert(certs / "gpu-extender-tls" / "tls.crt").serial_number
    assert openssl_verify(certs / "ca.crt", out / "gpu-extender-tls" / "tls.crt").returncode == 0

    run_script("-o", str(out), "--new-ca")
    assert (out / "ca.crt").read_bytes() != (certs / "ca.crt").read_bytes()
    # The old CA no longer verifies the new leaves: the chain check above is not vacuous.
    assert openssl_verify(certs / "ca.crt", out / "gpu-agent-tls" / "tls.crt").returncode != 0


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, server_name: str) -> dict:
    """One TLS handshake over a socket pair; returns the peer certificate the server saw."""
    a, b = socket.socketpair()
    seen: dict = {}
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(a, server_side=True) as tls:
                seen["client"] = tls.getpeercert()
                tls.sendall(b"x")
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname=server_name) as tls:
            assert tls.recv(1) == b"x"
    finally:
        b.close()  # a failed client handshake must not leave the server waiting
        thread.join(timeout=30)
        a.close()
    assert not errors, errors
    return seen


@needs_openssl
def test_agents_and_scheduler_can_handshake_with_the_extender(
    certs: Path, base_objects: list[m.KubeObject], scheduler_config: dict
) -> None:
    """mTLS as the agents do it (client certificate, --tls-server-name) and server-auth TLS as
    kube-scheduler does it (tlsConfig.serverName, caFile), with the script's certificates."""
    ext_dir, agent_dir = certs / "gpu-extender-tls", certs / "gpu-agent-tls"
    agent_pod = m.one(base_objects, "DaemonSet", "gpu-agent", m.NAMESPACE)["spec"]["template"]["spec"]
    agent_args = agent_pod["containers"][0]["args"]

    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(ext_dir / "tls.crt", ext_dir / "tls.key")
    server.load_verify_locations(ext_dir / "ca.crt")
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.create_default_context(cafile=str(agent_dir / "ca.crt"))
    client.load_cert_chain(agent_dir / "tls.crt", agent_dir / "tls.key")
    seen = _handshake(server, client, m.flag_value(agent_args, "--tls-server-name"))
    assert ("commonName", "gpu-agent") in [rdn for rdns in seen["client"]["subject"] for rdn in rdns]

    https = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    https.load_cert_chain(ext_dir / "tls.crt", ext_dir / "tls.key")
    scheduler = ssl.create_default_context(cafile=str(ext_dir / "ca.crt"))
    _handshake(https, scheduler, scheduler_config["extenders"][0]["tlsConfig"]["serverName"])
    _handshake(https, scheduler, LOOPBACK_IP)  # gpu-extender explain --url https://127.0.0.1:8888

    # A name the certificate does not carry fails: the checks above are real.
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(https, scheduler, "gpu-extender.default.svc")


@needs_openssl
@pytest.mark.skipif(m.KUBECTL is None, reason=m.NO_KUBECTL)
def test_tls_kustomization_makes_the_secrets_the_base_mounts(
    certs: Path, tmp_path: Path, base_objects: list[m.KubeObject]
) -> None:
    """deploy/tls/kustomization.yaml, rendered next to the script's output (its file paths are
    relative)."""
    doc = m.load_yaml_docs(m.DEPLOY / "tls" / "kustomization.yaml")[0]
    assert "resources" not in doc  # the Secrets alone (the namespace is deploy/'s)
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    shutil.copytree(certs, tmp_path / "out")
    objects = m.kustomize(tmp_path)
    secrets = {s["metadata"]["name"]: s for s in m.find(objects, "Secret")}
    assert set(secrets) == set(SECRETS)
    for secret in secrets.values():
        assert secret["metadata"]["namespace"] == m.NAMESPACE
        assert secret["type"] == "kubernetes.io/tls"
        assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    # The namespace is deploy/'s alone (issue 38 item 5): applied here too, one object would be
    # applied two ways (client- and server-side) with two Pod Security levels.
    assert not m.find(objects, "Namespace") and {o["kind"] for o in objects} == {"Secret"}
    mounted = {
        v["secret"]["secretName"]
        for _, pod in m.pod_templates(base_objects)
        for v in pod.get("volumes", [])
        if "secret" in v
    }
    assert mounted == set(SECRETS)


def test_cert_manager_component_issues_the_same_secrets(base_objects: list[m.KubeObject]) -> None:
    objects = m.load_source(m.COMPONENTS / "cert-manager")
    issuers = {i["metadata"]["name"]: i for i in m.find(objects, "Issuer")}
    certs = {c["spec"]["secretName"]: c["spec"] for c in m.find(objects, "Certificate")}
    for obj in objects:
        assert obj["apiVersion"] == "cert-manager.io/v1" and obj["metadata"]["namespace"] == m.NAMESPACE
    assert set(certs) == {*SECRETS, "gpu-extender-ca"}
    ca = certs["gpu-extender-ca"]
    assert ca["isCA"] is True and issuers[ca["issuerRef"]["name"]]["spec"] == {"selfSigned": {}}
    for secret in SECRETS:
        issuer = issuers[certs[secret]["issuerRef"]["name"]]
        # Both leaves come from the CA Issuer, so the ca.crt in both Secrets is the same CA.
        assert issuer["spec"]["ca"]["secretName"] == "gpu-extender-ca"
    assert set(certs["gpu-extender-tls"]["dnsNames"]) == expected_server_names(base_objects)
    assert certs["gpu-extender-tls"]["ipAddresses"] == [LOOPBACK_IP]
    server_usages, client_usages = certs["gpu-extender-tls"]["usages"], certs["gpu-agent-tls"]["usages"]
    assert "server auth" in server_usages and "client auth" not in server_usages
    assert "client auth" in client_usages and "server auth" not in client_usages
