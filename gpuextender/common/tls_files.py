"""Reading the certificate, key and token files named by flags, shared by both programs.

Errors name the flag, so the one line a user sees says which setting to fix.
`FileSignature` detects rotation cheaply: cert-manager and the kubelet replace
mounted Secret files by swapping a symlink, which changes the inode even when
the mtime resolution would hide a quick rewrite.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path


class CredentialFileError(OSError):
    """A file named by a flag cannot be read; the message names the flag and the cause."""


def read_flag_file(flag: str, path: Path) -> bytes:
    """The file's bytes, or CredentialFileError("--flag PATH: cause")."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CredentialFileError(f"{flag} {path}: cannot read: {exc.strerror or exc}") from None
    if not data.strip():
        raise CredentialFileError(f"{flag} {path}: the file is empty")
    return data


def check_readable(flag: str, path: Path | None) -> None:
    """For config validation: fail now rather than at the first handshake."""
    if path is not None:
        read_flag_file(flag, path)


def check_ca(flag: str, path: Path) -> None:
    """The file holds at least one PEM certificate a TLS library can trust."""
    try:
        ssl.create_default_context(cafile=str(path))
    except (ssl.SSLError, OSError) as exc:
        raise CredentialFileError(f"{flag} {path}: not a PEM CA certificate: {exc}") from None


def check_pair(cert: Path, key: Path, flags: tuple[str, str] = ("--tls-cert", "--tls-key")) -> None:
    """The certificate and key load and belong together (else every handshake would fail)."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise CredentialFileError(f"{flags[0]} {cert} / {flags[1]} {key}: cannot load the pair: {exc}") from None


@dataclass(frozen=True, slots=True)
class FileSignature:
    """What changes when a file is rewritten or replaced (None: missing)."""

    stats: tuple[tuple[int, int, int] | None, ...]

    @classmethod
    def of(cls, *paths: Path | None) -> FileSignature:
        return cls(tuple(_stat(p) for p in paths))


def _stat(path: Path | None) -> tuple[int, int, int] | None:
    if path is None:
        return None
    try:
        st = os.stat(path)  # follows the kubelet's ..data symlink to the real file
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


@dataclass(frozen=True, slots=True)
class ServingTlsFiles:
    """The extender's --tls-cert/--tls-key/--tls-ca (serving_tls.py loads and reloads them)."""

    cert: Path
    key: Path
    client_ca: Path | None = None  # set: agents must present a certificate signed by it (gRPC only)
