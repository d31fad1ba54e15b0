"""Why a stream attempt failed, in words that name the flag to fix (pure).

gRPC reports a TLS failure as UNAVAILABLE with BoringSSL's text buried in the
details ("failed to connect to all addresses; last error: ... Tls handshake
failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: ...CERTIFICATE_VERIFY_FAILED..."),
the same code as an extender that is simply down. These rules recognise the
handshake failures an operator can fix and say how. A server that refuses our
client certificate (or that wants one we did not send) shows up on our side
only as "Socket closed" while connecting: TLS 1.3 lets the client finish its
half of the handshake first, so that one is worded as the probable cause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuextender.common.dial import DialSettings

_VERIFY_REASON = re.compile(r"CERTIFICATE_VERIFY_FAILED:\s*([^:]+)", re.IGNORECASE)
_SSL_ERROR = re.compile(r"(SSL_ERROR_\w+:.*)$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class StreamProblem:
    kind: str  # changes of kind are logged at once; the same kind again is rate-limited
    message: str


def describe_failure(code: str, details: str, target: str, settings: DialSettings) -> StreamProblem:
    """A failed call's status (`code` name, `details`) → what went wrong."""
    text = details or ""
    lower = text.lower()
    connecting = "failed to connect" in lower
    handshake = f"TLS handshake with {target} failed"
    if "certificate_verify_failed" in lower:
        match = _VERIFY_REASON.search(text)
        why = f" ({match.group(1).strip()})" if match else ""
        return StreamProblem(
            "tls-verify",
            f"{handshake}: certificate verify failed{why}: the extender's "
            f"certificate is not signed by --tls-ca {settings.tls_ca}; "
            "check --tls-ca / --tls-server-name",
        )
    if "hostname verification" in lower or "not in peer certificate" in lower:
        name = settings.tls_server_name or target.rpartition(":")[0]
        return StreamProblem(
            "tls-name",
            f"{handshake}: the extender's certificate is not valid for {name!r}; "
            "check --tls-server-name (a name in the certificate) / --tls-ca",
        )
    if "wrong_version_number" in lower:
        return StreamProblem(
            "tls-plaintext",
            f"{handshake}: the extender does not speak TLS (started without "
            "--tls-cert/--tls-key?); check --tls-ca on the agent and TLS on the extender",
        )
    if "handshake failed" in lower:
        match = _SSL_ERROR.search(text)
        cause = match.group(1).strip() if match else text
        return StreamProblem("tls", f"{handshake}: {cause}; check --tls-ca / --tls-server-name")
    if connecting and ("socket closed" in lower or "connection reset" in lower):
        if settings.tls and settings.client_cert:
            return StreamProblem(
                "tls-client-cert",
                f"{handshake}: the extender closed the connection during the "
                f"handshake; it probably refused our client certificate --tls-cert "
                f"{settings.tls_cert} (not signed by the extender's --tls-ca?)",
            )
        if settings.tls:
            return StreamProblem(
                "tls-client-cert",
                f"{handshake}: the extender closed the connection during the "
                "handshake; it probably requires a client certificate (mTLS): pass "
                "--tls-cert and --tls-key",
            )
        return StreamProblem(
            "plaintext-to-tls",
            f"the extender at {target} closed the connection at once; it probably requires TLS: pass --tls-ca",
        )
    return StreamProblem(code, f"{code}: {text}" if text else code)
