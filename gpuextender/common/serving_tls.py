"""The extender's server certificate for HTTPS (aiohttp) and TLS/mTLS on gRPC,
reloaded when cert-manager rotates the files, without a restart.

Both servers ask for the current certificate when a connection starts, so no
timer is needed: aiohttp through the SSL context's `sni_callback` (OpenSSL
calls it on every ClientHello, with or without SNI; the handshake is switched
to the newest context), gRPC through `dynamic_ssl_server_credentials`, whose
fetcher runs per new connection. The files are stat()ed at most once per
`check_interval_s`; a change is loaded into a fresh context and used only if
it loads cleanly (a half-written rotation keeps the previous certificate and
is retried when the files change again). Open connections keep their
certificate; only new handshakes see the new one.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from gpuextender.common.tls_files import CredentialFileError, FileSignature, ServingTlsFiles, check_ca, read_flag_file

log = logging.getLogger("gpu_extender.tls")


class TlsLoadError(ValueError):
    """The certificate files cannot be used; the message names the flag."""


@dataclass(frozen=True, slots=True)
class _Loaded:
    signature: FileSignature
    ssl_context: ssl.SSLContext
    grpc_config: grpc.ServerCertificateConfiguration


def _load(files: ServingTlsFiles) -> _Loaded:
    signature = FileSignature.of(files.cert, files.key, files.client_ca)
    try:
        cert = read_flag_file("--tls-cert", files.cert)
        key = read_flag_file("--tls-key", files.key)
        client_ca = read_flag_file("--tls-ca", files.client_ca) if files.client_ca else None
    except CredentialFileError as exc:
        raise TlsLoadError(str(exc)) from None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)  # verify_mode NONE: probes have no client cert
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(files.cert, files.key)
    except (ssl.SSLError, OSError) as exc:
        raise TlsLoadError(f"--tls-cert {files.cert} / --tls-key {files.key}: cannot load the pair: {exc}") from None
    if files.client_ca is not None:
        try:  # grpc would only fail at the first handshake: check the CA here
            check_ca("--tls-ca", files.client_ca)
        except CredentialFileError as exc:
            raise TlsLoadError(str(exc)) from None
    if FileSignature.of(files.cert, files.key, files.client_ca) != signature:
        raise TlsLoadError("the certificate files changed while being read (rotation in progress)")
    grpc_config = grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=client_ca)
    return _Loaded(signature, context, grpc_config)


def serving_certificate(files: ServingTlsFiles | None) -> ServingCertificate | None:
    """The certificate of `files` (None: TLS off); raises TlsLoadError if they are unusable."""
    return None if files is None else ServingCertificate(files)


class ServingCertificate:
    """The current certificate; raises TlsLoadError at construction if the files are unusable."""

    def __init__(
        self,
        files: ServingTlsFiles,
        *,
        check_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.files = files
        self._check_interval_s = check_interval_s
        self._clock = clock
        self._lock = threading.Lock()  # the gRPC fetcher runs on a gRPC thread
        self._loaded = _load(files)
        self._checked_at = clock()
        self._failed_signature: FileSignature | None = None
        self._grpc_served: _Loaded | None = None
        self.reloads = 0
        self._base = self._loaded.ssl_context
        self._base.sni_callback = self._on_client_hello

    def ssl_context(self) -> ssl.SSLContext:
        """For aiohttp's TCPSite; each handshake is switched to the newest certificate."""
        return self._base

    def grpc_credentials(self) -> grpc.ServerCredentials:
        self._grpc_served = self._loaded
        return grpc.dynamic_ssl_server_credentials(
            self._loaded.grpc_config,
            self._grpc_fetch,
            require_client_authentication=self.files.client_ca is not None,
        )

    def current(self) -> _Loaded:
        with self._lock:
            now = self._clock()
            if now - self._checked_at < self._check_interval_s:
                return self._loaded
            self._checked_at = now
            signature = FileSignature.of(self.files.cert, self.files.key, self.files.client_ca)
            if signature == self._loaded.signature or signature == self._failed_signature:
                return self._loaded
            try:
                self._loaded = _load(self.files)
            except TlsLoadError as exc:
                self._failed_signature = signature
                log.warning("TLS certificate files changed but cannot be used; keeping the previous one: %s", exc)
                return self._loaded
            self._failed_signature = None
            self.reloads += 1
            log.info("reloaded the TLS certificate from %s (new connections use it)", self.files.cert)
            return self._loaded

    def _on_client_hello(self, sslobj: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        try:
            newest = self.current().ssl_context
            if newest is not context:
                sslobj.context = newest
        except Exception:  # never fail a handshake over a reload problem: the old certificate still serves
            log.exception("TLS certificate check failed")
        return None

    def _grpc_fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """None tells gRPC to keep what it has."""
        try:
            loaded = self.current()
        except Exception:
            log.exception("TLS certificate check failed")
            return None
        if loaded is self._grpc_served:
            return None
        self._grpc_served = loaded
        return loaded.grpc_config
