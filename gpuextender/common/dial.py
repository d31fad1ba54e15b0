"""How a stream dials an extender: plaintext or TLS/mTLS, and the bearer token.

Everything is read from disk again for every (re)connect, so rotated
certificates and the kubelet's refreshed projected token are picked up
without a restart. A file that cannot be read raises `DialError`; the stream
then logs it and retries with backoff like any other failed attempt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from gpuextender.common.tls_files import CredentialFileError, check_ca, check_pair, check_readable, read_flag_file


class DialError(Exception):
    """A credential file is missing or unreadable; the message names the flag."""


@dataclass(frozen=True, slots=True)
class DialSettings:
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_server_name: str | None = None
    token_file: Path | None = None
    flag_prefix: str = "--"  # how the flags are named in messages: `--tls-ca`, a relay's `--extender-tls-ca`

    @property
    def tls(self) -> bool:
        return self.tls_ca is not None

    @property
    def client_cert(self) -> bool:
        return self.tls_cert is not None


def checked_dial_settings(
    tls_ca: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_server_name: str | None,
    token_file: Path | None,
    flag_prefix: str = "--",
) -> DialSettings:
    """DialSettings from flags (`{flag_prefix}tls-ca` ...), their files checked now; DialError names
    the flag that is wrong and why."""
    ca, cert, key, name = (f"{flag_prefix}{flag}" for flag in ("tls-ca", "tls-cert", "tls-key", "tls-server-name"))
    if (tls_cert is None) != (tls_key is None):
        raise DialError(f"{cert} and {key} go together: pass both or neither")
    if tls_ca is None and (tls_cert is not None or tls_server_name):
        flag = f"{cert}/{key}" if tls_cert is not None else name
        raise DialError(f"{flag} needs {ca} (the CA that signed the extender's certificate)")
    try:
        for flag, path in ((ca, tls_ca), (cert, tls_cert), (key, tls_key)):
            check_readable(flag, path)
        if tls_ca is not None:
            check_ca(ca, tls_ca)
        if tls_cert is not None and tls_key is not None:
            check_pair(tls_cert, tls_key, (cert, key))
    except CredentialFileError as exc:
        raise DialError(str(exc)) from None
    return DialSettings(tls_ca, tls_cert, tls_key, (tls_server_name or "").strip() or None, token_file, flag_prefix)


# A fresh channel must mean a fresh connection. In gRPC's process-wide subchannel pool a
# new channel to the same address shares the subchannel of the one just closed, with its
# cached "connection refused" and gRPC's own reconnect backoff (1 s growing to 120 s): calls
# fail at once until that runs out, so agents came back long after the extender did.
OWN_SUBCHANNELS = ("grpc.use_local_subchannel_pool", 1)


def open_channel(target: str, settings: DialSettings, options: Sequence[tuple[str, Any]]) -> grpc.aio.Channel:
    """A channel with its own subchannels (`OWN_SUBCHANNELS`): it dials now, whatever came before."""
    channel_options: list[tuple[str, Any]] = [*options, OWN_SUBCHANNELS]
    if not settings.tls:
        return grpc.aio.insecure_channel(target, options=channel_options)
    assert settings.tls_ca is not None
    try:
        prefix = settings.flag_prefix
        ca = read_flag_file(f"{prefix}tls-ca", settings.tls_ca)
        cert = read_flag_file(f"{prefix}tls-cert", settings.tls_cert) if settings.tls_cert else None
        key = read_flag_file(f"{prefix}tls-key", settings.tls_key) if settings.tls_key else None
    except CredentialFileError as exc:
        raise DialError(str(exc)) from None
    credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
    tls_options = channel_options
    if settings.tls_server_name:
        # Pod IPs from the headless Service are not in the certificate; its DNS name is.
        tls_options.append(("grpc.ssl_target_name_override", settings.tls_server_name))
    return grpc.aio.secure_channel(target, credentials, options=tls_options)


def call_metadata(settings: DialSettings) -> tuple[tuple[str, str], ...]:
    if settings.token_file is None:
        return ()
    try:
        raw = read_flag_file(f"{settings.flag_prefix}token-file", settings.token_file)
    except CredentialFileError as exc:
        raise DialError(str(exc)) from None
    token = raw.decode("utf-8", "replace").strip()
    return (("authorization", f"Bearer {token}"),)
