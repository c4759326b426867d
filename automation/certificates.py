"""What the portal's self-signed TLS (automation/portal/tls.py) and the local fleet's PKI (automation/local/pki.py)
both make: a CA of their own, and files written with their mode from the first byte."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Authority:
    key: Any  # an EC private key (cryptography)
    certificate: Any
    name: Any  # its x509.Name, the issuer of what it signs
    not_before: datetime.datetime
    not_after: datetime.datetime


def new_authority(common_name: str, days: int) -> Authority:
    """A CA (P-256) that may only sign certificates, valid from five minutes ago (clocks that lag a little)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=days)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return Authority(key, cert, name, now, until)


def write_private(path: Path, data: bytes, mode: int) -> None:
    """Created with its mode (a key is never readable by others, not even for a moment), then moved in place."""
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(partial, path)
