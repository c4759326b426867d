"""A certificate for `serve --tls-self-signed`: a small CA of the portal's own and a server certificate it signed.

kubectl sends a bearer token only over TLS (client-go's rule), so the portal needs a certificate before kubectl can
use it at all. A CA separate from the server certificate is what a kubeconfig's `certificate-authority` names, and it
verifies with Go's and OpenSSL's checks alike. Both are kept in the data folder and reused while they still cover the
names asked for (a restart keeps every kubeconfig working); the keys are written 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography import x509

from automation.certificates import new_authority, write_private

VALID_DAYS = 365


@dataclass(frozen=True)
class SelfSigned:
    ca: Path  # what a kubeconfig's certificate-authority names
    cert: Path
    key: Path


def names_for(host: str) -> list[str]:
    """Loopback always, and the listening address when it names one host (not 0.0.0.0 or ::)."""
    names = ["localhost", "127.0.0.1", "::1"]
    if host and host not in names and host not in ("0.0.0.0", "::"):
        names.append(host)
    return names


def self_signed(folder: Path, host: str) -> SelfSigned:
    """The CA and server certificate under `folder/tls`, made now unless the ones there still serve `host`."""
    tls = folder / "tls"
    out = SelfSigned(tls / "ca.crt", tls / "tls.crt", tls / "tls.key")
    wanted = names_for(host)
    if not _still_good(out, wanted):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # as serve makes the data folder
        tls.mkdir(mode=0o700, exist_ok=True)
        _generate(out, wanted)
    return out


def _still_good(files: SelfSigned, wanted: list[str]) -> bool:
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        files.ca.stat()
        files.key.stat()
    except (OSError, ValueError):
        return False
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    have = {str(n) for n in names.get_values_for_type(x509.DNSName)}
    have |= {str(n) for n in names.get_values_for_type(x509.IPAddress)}
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=7)
    return set(wanted) <= have and cert.not_valid_after_utc > soon


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    from cryptography import x509

    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(out)


def _generate(files: SelfSigned, names: list[str]) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    authority = new_authority("modelplane portal CA", VALID_DAYS)
    ca_key, ca_name, ca, now, until = (authority.key, authority.name, authority.certificate, authority.not_before,
                                       authority.not_after)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "modelplane portal")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .add_extension(_san(names), critical=False)
            .sign(ca_key, hashes.SHA256()))
    # the CA's key is not kept: nothing else is ever signed with it
    write_private(files.key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()), 0o600)
    write_private(files.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    write_private(files.ca, ca.public_bytes(serialization.Encoding.PEM), 0o644)
