"""The extender's serving certificate on a real aiohttp server and a real grpc.aio server:
HTTPS, TLS and mTLS on gRPC, and certificate rotation without a restart."""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

import aiohttp
import grpc
import pytest
import trustme
from aiohttp import web

from gpuextender.common.serving_tls import ServingCertificate, TlsLoadError
from gpuextender.common.tls_files import ServingTlsFiles
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from tests.harness import client_ssl_context, write_ca, write_leaf, write_pem


class Echo(pb_grpc.GpuStateServiceServicer):
    async def StreamNodeReports(self, request_iterator, context):
        async for report in request_iterator:
            yield pb.ReportAck(sequence=report.sequence)


async def https_get(port: int, ca: trustme.CA) -> str:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"https://127.0.0.1:{port}/", ssl=client_ssl_context(ca)) as response:
            return await response.text()


async def ok(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def serve_https(certificate: ServingCertificate) -> tuple[web.AppRunner, int]:
    app = web.Application()
    app.router.add_get("/", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=certificate.ssl_context())
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def grpc_exchange(port: int, ca: trustme.CA, client: trustme.LeafCert | None = None) -> int:
    """One report over TLS; the ack's sequence, or raises AioRpcError."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.cert_pem.bytes(),
        private_key=client.private_key_pem.bytes() if client else None,
        certificate_chain=client.cert_chain_pems[0].bytes() if client else None,
    )
    options = [("grpc.ssl_target_name_override", "extender.test")]
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials, options=options) as channel:
        call = pb_grpc.GpuStateServiceStub(channel).StreamNodeReports()
        await call.write(pb.NodeReport(node_name="n", sequence=7))
        ack = await call.read()
        call.cancel()
        return ack.sequence


async def serve_grpc(certificate: ServingCertificate) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    pb_grpc.add_GpuStateServiceServicer_to_server(Echo(), server)
    port = server.add_secure_port("127.0.0.1:0", certificate.grpc_credentials())
    await server.start()
    return server, port


def test_https_certificate_is_replaced_for_new_connections_when_the_files_change(tmp_path: Path) -> None:
    old_ca, new_ca = trustme.CA(), trustme.CA()
    cert, key = write_leaf(tmp_path, old_ca, "tls", "127.0.0.1")
    certificate = ServingCertificate(ServingTlsFiles(cert, key), check_interval_s=0)

    async def scenario() -> None:
        runner, port = await serve_https(certificate)
        try:
            assert await https_get(port, old_ca) == "ok"
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await https_get(port, new_ca)
            write_leaf(tmp_path, new_ca, "tls", "127.0.0.1")  # cert-manager rotates the Secret
            assert await https_get(port, new_ca) == "ok"
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await https_get(port, old_ca)
            assert certificate.reloads == 1
        finally:
            await runner.cleanup()

    asyncio.run(scenario())


def test_a_half_written_rotation_keeps_the_previous_certificate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old_ca, new_ca = trustme.CA(), trustme.CA()
    cert, key = write_leaf(tmp_path, old_ca, "tls", "127.0.0.1")
    certificate = ServingCertificate(ServingTlsFiles(cert, key), check_interval_s=0)
    new_leaf = new_ca.issue_cert("127.0.0.1")

    async def scenario() -> None:
        runner, port = await serve_https(certificate)
        try:
            write_pem(cert, new_leaf.cert_chain_pems[0].bytes())  # the new cert, still the old key
            assert await https_get(port, old_ca) == "ok"
            write_pem(key, new_leaf.private_key_pem.bytes())  # the pair is complete again
            assert await https_get(port, new_ca) == "ok"
        finally:
            await runner.cleanup()

    with caplog.at_level(logging.WARNING, logger="gpu_extender.tls"):
        asyncio.run(scenario())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "keeping the previous one" in warnings[0] and "--tls-key" in warnings[0]
    assert certificate.reloads == 1


def test_grpc_tls_follows_the_rotated_certificate(tmp_path: Path) -> None:
    old_ca, new_ca = trustme.CA(), trustme.CA()
    cert, key = write_leaf(tmp_path, old_ca, "tls", "extender.test")
    certificate = ServingCertificate(ServingTlsFiles(cert, key), check_interval_s=0)

    async def scenario() -> None:
        server, port = await serve_grpc(certificate)
        try:
            assert await grpc_exchange(port, old_ca) == 7
            write_leaf(tmp_path, new_ca, "tls", "extender.test")
            assert await grpc_exchange(port, new_ca) == 7
            with pytest.raises(grpc.aio.AioRpcError, match="CERTIFICATE_VERIFY_FAILED"):
                await grpc_exchange(port, old_ca)
        finally:
            await server.stop(None)

    asyncio.run(scenario())


def test_grpc_mtls_requires_a_client_certificate_from_the_ca(tmp_path: Path) -> None:
    server_ca, client_ca, stranger_ca = trustme.CA(), trustme.CA(), trustme.CA()
    cert, key = write_leaf(tmp_path, server_ca, "tls", "extender.test")
    files = ServingTlsFiles(cert, key, write_ca(tmp_path, client_ca, "clients"))
    certificate = ServingCertificate(files, check_interval_s=0)

    async def scenario() -> None:
        server, port = await serve_grpc(certificate)
        try:
            assert await grpc_exchange(port, server_ca, client_ca.issue_cert("agent")) == 7
            for client in (None, stranger_ca.issue_cert("agent")):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await grpc_exchange(port, server_ca, client)
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        finally:
            await server.stop(None)

    asyncio.run(scenario())


def test_unusable_files_fail_at_start_naming_the_flags(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, key = write_leaf(tmp_path, ca, "tls", "127.0.0.1")
    _, other_key = write_leaf(tmp_path, ca, "other", "127.0.0.1")
    with pytest.raises(TlsLoadError, match=r"--tls-cert .* / --tls-key .*: cannot load the pair"):
        ServingCertificate(ServingTlsFiles(cert, other_key))
    not_a_ca = write_pem(tmp_path / "ca.pem", b"hello\n")
    with pytest.raises(TlsLoadError, match=r"--tls-ca .*not a PEM CA certificate"):
        ServingCertificate(ServingTlsFiles(cert, key, not_a_ca))
    with pytest.raises(TlsLoadError, match=r"--tls-key .*: cannot read: No such file"):
        ServingCertificate(ServingTlsFiles(cert, tmp_path / "missing.key"))


def test_https_refuses_clients_that_do_not_trust_the_ca(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, key = write_leaf(tmp_path, ca, "tls", "127.0.0.1")
    certificate = ServingCertificate(ServingTlsFiles(cert, key))

    async def scenario() -> None:
        runner, port = await serve_https(certificate)
        try:
            with pytest.raises(aiohttp.ClientConnectorCertificateError) as refused:
                await https_get(port, trustme.CA())
            assert isinstance(refused.value.certificate_error, ssl.SSLCertVerificationError)
        finally:
            await runner.cleanup()

    asyncio.run(scenario())
