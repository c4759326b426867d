"""The local fleet's certificates: one CA, each API server's serving certificate, the admin's client certificate
(group system:masters, as kubeadm's admin.conf has) and the service-account signing key pair.

Made once per local fleet with `cryptography` (already a dependency, for the portal's self-signed TLS) and kept under
`.modelplane/local/pki/`, keys 0600. They only ever serve loopback addresses.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from automation.certificates import new_authority, write_private

VALID_DAYS = 365


@dataclass(frozen=True)
class Pki:
    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.folder / "ca.key"

    @property
    def serving(self) -> tuple[Path, Path]:
        return self.folder / "apiserver.crt", self.folder / "apiserver.key"

    @property
    def admin(self) -> tuple[Path, Path]:
        return self.folder / "admin.crt", self.folder / "admin.key"

    @property
    def service_accounts(self) -> tuple[Path, Path]:
        return self.folder / "sa.pub", self.folder / "sa.key"


def ensure(folder: Path) -> Pki:
    """The fleet's PKI, made if any part is missing (then all of it, so no certificate outlives its CA)."""
    pki = Pki(folder)
    parts = [pki.ca, pki.ca_key, *pki.serving, *pki.admin, *pki.service_accounts]
    if not all(p.is_file() for p in parts):
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        _generate(pki)
    return pki


def _generate(pki: Pki) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    authority = new_authority("modelplane local fleet CA", VALID_DAYS)
    ca_key, ca_name, ca, now, until = (authority.key, authority.name, authority.certificate, authority.not_before,
                                       authority.not_after)

    def leaf(subject: x509.Name, usage, names: list[x509.GeneralName]):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return key, builder.sign(ca_key, hashes.SHA256())

    # what in-cluster clients would name the API server by (none dials it but through loopback)
    serving_names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                             x509.DNSName("localhost"), x509.DNSName("kubernetes"),
                                             x509.DNSName("kubernetes.default"), x509.DNSName("kubernetes.default.svc")]
    serving_key, serving = leaf(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
                                ExtendedKeyUsageOID.SERVER_AUTH, serving_names)
    admin_key, admin = leaf(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                                       x509.NameAttribute(NameOID.COMMON_NAME, "modelplane-local-admin")]),
                            ExtendedKeyUsageOID.CLIENT_AUTH, [])
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def private(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    def public(cert) -> bytes:
        return cert.public_bytes(serialization.Encoding.PEM)

    write_private(pki.ca_key, private(ca_key), 0o600)
    write_private(pki.ca, public(ca), 0o644)
    write_private(pki.serving[1], private(serving_key), 0o600)
    write_private(pki.serving[0], public(serving), 0o644)
    write_private(pki.admin[1], private(admin_key), 0o600)
    write_private(pki.admin[0], public(admin), 0o644)
    write_private(pki.service_accounts[1], private(sa_key), 0o600)
    write_private(pki.service_accounts[0], sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo), 0o644)


def kubeconfig(pki: Pki, cluster: str, server: str) -> str:
    """A kubeconfig for the admin of one local cluster, with the certificates inline (the file is 0600: it holds
    the admin's key)."""
    import base64

    import yaml

    def inline(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    user = f"{cluster}-admin"
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": cluster,
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": inline(pki.ca)}}],
        "users": [{"name": user, "user": {"client-certificate-data": inline(pki.admin[0]),
                                          "client-key-data": inline(pki.admin[1])}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
    }, sort_keys=False)
