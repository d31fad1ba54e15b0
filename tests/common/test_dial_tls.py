"""The agent's stream over TLS / mTLS with a bearer token, against real grpc.aio servers on
loopback: credentials re-read on every reconnect, and handshake failures logged in words that
name the flag to fix (once, not once per attempt)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest
import trustme

from gpuextender.agent.export.metrics import AgentMetrics
from gpuextender.agent.report.latest import LatestReport
from gpuextender.agent.stream.streamer import ExtenderStream
from gpuextender.common.backoff import Backoff
from gpuextender.common.dial import DialError, DialSettings, call_metadata, checked_dial_settings, open_channel
from gpuextender.common.serving_tls import ServingCertificate
from gpuextender.common.stream_problem import describe_failure
from gpuextender.common.tls_files import ServingTlsFiles
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from tests.agent.stream.test_streamer import value, wait_for
from tests.harness import write_ca, write_leaf, write_pem

SERVER_NAME = "gpu-extender.gpu-extender.svc"


class TokenRecorder(pb_grpc.GpuStateServiceServicer):
    """Records each stream's authorization header; ends every stream after one report, so the
    agent reconnects over and over."""

    def __init__(self) -> None:
        self.tokens: list[str | None] = []

    async def StreamNodeReports(
        self, request_iterator: AsyncIterator[pb.NodeReport], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ReportAck]:
        self.tokens.append(dict(context.invocation_metadata()).get("authorization"))
        async for report in request_iterator:
            yield pb.ReportAck(sequence=report.sequence)
            return


class Pki:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.server_ca, self.client_ca = trustme.CA(), trustme.CA()
        self.server_ca_file = write_ca(directory, self.server_ca, "server-ca")
        self.client_ca_file = write_ca(directory, self.client_ca, "client-ca")
        self.server_cert, self.server_key = write_leaf(directory, self.server_ca, "server", SERVER_NAME)
        self.client_cert, self.client_key = write_leaf(directory, self.client_ca, "client", "gpu-agent")

    def dial(self, **overrides: object) -> DialSettings:
        settings = dict(
            tls_ca=self.server_ca_file, tls_cert=self.client_cert, tls_key=self.client_key, tls_server_name=SERVER_NAME
        )
        settings.update(overrides)
        return DialSettings(**settings)  # type: ignore[arg-type]


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


async def serve(
    servicer: pb_grpc.GpuStateServiceServicer, credentials: grpc.ServerCredentials | None
) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    pb_grpc.add_GpuStateServiceServicer_to_server(servicer, server)
    if credentials is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    return server, port


def mtls(pki: Pki) -> grpc.ServerCredentials:
    return ServingCertificate(ServingTlsFiles(pki.server_cert, pki.server_key, pki.client_ca_file)).grpc_credentials()


def stream_to(port: int, dial: DialSettings, latest: LatestReport, metrics: AgentMetrics) -> ExtenderStream:
    return ExtenderStream(
        f"127.0.0.1:{port}",
        latest,
        metrics,
        backoff=Backoff(0.02, 0.05),
        ack_timeout_s=5.0,
        on_requested_interval=lambda _: None,
        dial=dial,
    )


async def run_until(stream: ExtenderStream, done: Callable[[], object], timeout: float = 10.0) -> None:
    task = asyncio.create_task(stream.run())
    try:
        await wait_for(done, timeout)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_mtls_with_a_token_re_reads_both_on_every_reconnect(pki: Pki) -> None:
    token = write_pem(pki.dir / "token", b"token-one\n")
    stranger = trustme.CA()

    async def scenario() -> None:
        recorder = TokenRecorder()
        server, port = await serve(recorder, mtls(pki))
        latest, metrics = LatestReport(), AgentMetrics("n1")
        latest.publish(pb.NodeReport(node_name="n1", sequence=1))
        stream = stream_to(port, pki.dial(token_file=token), latest, metrics)
        task = asyncio.create_task(stream.run())
        try:
            await wait_for(lambda: "Bearer token-one" in recorder.tokens)
            write_pem(token, b"token-two\n")  # the kubelet refreshed the projected token
            await wait_for(lambda: "Bearer token-two" in recorder.tokens)
            assert recorder.tokens[-1] == "Bearer token-two"

            write_leaf(pki.dir, stranger, "client", "gpu-agent")  # a client cert the server does not accept
            await wait_for(lambda: value(metrics, "gpu_agent_stream_connected", extender=stream.target) == 0)
            streams = len(recorder.tokens)
            reconnects = value(metrics, "gpu_agent_stream_reconnects_total", extender=stream.target)
            await wait_for(
                lambda: value(metrics, "gpu_agent_stream_reconnects_total", extender=stream.target) >= reconnects + 3
            )
            assert len(recorder.tokens) <= streams + 1  # refused at the handshake: no more streams

            write_leaf(pki.dir, pki.client_ca, "client", "gpu-agent")  # rotated to a good one again
            await wait_for(lambda: len(recorder.tokens) >= streams + 2)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await server.stop(None)

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            "wrong-ca",
            "failed: certificate verify failed (unable to get local issuer certificate): the extender's "
            "certificate is not signed by --tls-ca",
        ),
        ("wrong-name", "failed: the extender's certificate is not valid for 'other.example'; check --tls-server-name"),
        (
            "no-client-cert",
            "failed: the extender closed the connection during the handshake; it probably requires "
            "a client certificate (mTLS): pass --tls-cert and --tls-key",
        ),
        (
            "foreign-client-cert",
            "failed: the extender closed the connection during the handshake; it probably "
            "refused our client certificate --tls-cert",
        ),
        ("tls-to-plaintext", "failed: the extender does not speak TLS"),
    ],
)
def test_handshake_failures_are_logged_once_naming_the_flag(
    pki: Pki, case: str, expected: str, caplog: pytest.LogCaptureFixture
) -> None:
    stranger = trustme.CA()
    dial = {
        "wrong-ca": lambda: pki.dial(tls_ca=write_ca(pki.dir, stranger, "stranger-ca")),
        "wrong-name": lambda: pki.dial(tls_server_name="other.example"),
        "no-client-cert": lambda: pki.dial(tls_cert=None, tls_key=None),
        "foreign-client-cert": lambda: pki.dial(
            tls_cert=write_leaf(pki.dir, stranger, "foreign", "a")[0], tls_key=pki.dir / "foreign.key"
        ),
        "tls-to-plaintext": lambda: pki.dial(),
    }[case]()

    async def scenario() -> None:
        server, port = await serve(TokenRecorder(), None if case == "tls-to-plaintext" else mtls(pki))
        latest, metrics = LatestReport(), AgentMetrics("n1")
        latest.publish(pb.NodeReport(node_name="n1", sequence=1))
        stream = stream_to(port, dial, latest, metrics)
        try:
            await run_until(
                stream, lambda: value(metrics, "gpu_agent_stream_reconnects_total", extender=stream.target) >= 4
            )
            assert not stream.connected
        finally:
            await server.stop(None)
        lines = [r.getMessage() for r in caplog.records if r.name == "gpu_agent.stream"]
        assert len(lines) == 1, lines  # 4 attempts, one line
        assert f"TLS handshake with 127.0.0.1:{port} {expected}" in lines[0]

    with caplog.at_level(logging.WARNING, logger="gpu_agent.stream"):
        asyncio.run(scenario())


def test_plaintext_to_a_tls_extender_says_to_pass_tls_ca(pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        server, port = await serve(TokenRecorder(), mtls(pki))
        latest, metrics = LatestReport(), AgentMetrics("n1")
        latest.publish(pb.NodeReport(node_name="n1", sequence=1))
        stream = stream_to(port, DialSettings(), latest, metrics)
        try:
            await run_until(
                stream, lambda: value(metrics, "gpu_agent_stream_reconnects_total", extender=stream.target) >= 2
            )
        finally:
            await server.stop(None)

    with caplog.at_level(logging.WARNING, logger="gpu_agent.stream"):
        asyncio.run(scenario())
    assert "probably requires TLS: pass --tls-ca" in caplog.text


def test_an_unreadable_token_file_is_a_warning_and_the_stream_retries(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    token = pki.dir / "projected" / "token"

    async def scenario() -> None:
        recorder = TokenRecorder()
        server, port = await serve(recorder, mtls(pki))
        latest, metrics = LatestReport(), AgentMetrics("n1")
        latest.publish(pb.NodeReport(node_name="n1", sequence=1))
        stream = stream_to(port, pki.dial(token_file=token), latest, metrics)
        task = asyncio.create_task(stream.run())
        try:
            await wait_for(lambda: value(metrics, "gpu_agent_stream_reconnects_total", extender=stream.target) >= 3)
            assert recorder.tokens == []
            token.parent.mkdir()
            write_pem(token, b"late-token")
            await wait_for(lambda: "Bearer late-token" in recorder.tokens)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await server.stop(None)

    with caplog.at_level(logging.WARNING, logger="gpu_agent.stream"):
        asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records if "--token-file" in r.getMessage()]
    assert len(lines) == 1 and f"--token-file {token}: cannot read: No such file or directory" in lines[0]


def test_describe_failure_leaves_other_errors_as_they_are() -> None:
    plain = DialSettings()
    refused = (
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to "
        "remote host: Connection refused"
    )
    problem = describe_failure("UNAVAILABLE", refused, "127.0.0.1:1", plain)
    assert problem.kind == "UNAVAILABLE" and problem.message == f"UNAVAILABLE: {refused}"
    denied = describe_failure("PERMISSION_DENIED", "token belongs to 'x'", "h:1", plain)
    assert denied.message == "PERMISSION_DENIED: token belongs to 'x'"
    alert = (
        "last error: Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: "
        "error:10000410:SSL routines:OPENSSL_internal:SSLV3_ALERT_HANDSHAKE_FAILURE"
    )
    other = describe_failure("UNAVAILABLE", alert, "h:1", DialSettings(tls_ca=Path("ca.pem")))
    assert other.message.startswith("TLS handshake with h:1 failed: SSL_ERROR_SSL: ")
    assert other.message.endswith("check --tls-ca / --tls-server-name")


def test_a_relays_files_are_named_by_its_own_flags(tmp_path: Path) -> None:
    """The same dialling for a relay (`--extender-` flags): a file that goes away between
    reconnects is named by the flag the relay was given."""

    token = tmp_path / "token"
    token.write_text("t\n")
    settings = checked_dial_settings(None, None, None, None, token, flag_prefix="--extender-")
    assert call_metadata(settings) == (("authorization", "Bearer t"),)
    token.unlink()
    with pytest.raises(DialError, match=r"^--extender-token-file "):
        call_metadata(settings)
    ca = tmp_path / "ca.crt"
    trustme.CA().cert_pem.write_to_path(str(ca))
    tls = checked_dial_settings(ca, None, None, "x.svc", None, flag_prefix="--extender-")
    ca.unlink()
    with pytest.raises(DialError, match=r"^--extender-tls-ca "):
        open_channel("127.0.0.1:1", tls, [])
