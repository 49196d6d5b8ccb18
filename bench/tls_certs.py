"""Certificates and keys made on the spot (``cryptography``) for the tests and
``bench/security.py``: a CA, a server certificate for 127.0.0.1 (an IP SAN), client
certificates, another CA's client certificate, and JWT signing keys. Nothing is read
from the repository; every file is written under the caller's folder. (In bench/, as
the HDFS side is, because a benchmark may not import tests/.)

``pki = Pki(tmp_path)`` writes ``pki.ca`` (PEM), ``pki.server_cert``/``server_key``,
``pki.client("alice")`` -> (cert path, key path) signed by the CA, and
``pki.stranger("alice")`` -> the same from a CA nobody trusts.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_NOW = datetime.datetime.now(datetime.timezone.utc)


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())  # fast to make, unlike RSA


def key_pem(key, password: bytes | None = None) -> bytes:
    crypt = serialization.BestAvailableEncryption(password) if password else \
        serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, crypt)


def public_pem(key) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _name(cn: str, org: str = "sparklog tests") -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


class Authority:
    """A self-signed CA that signs leaf certificates."""

    def __init__(self, name: str):
        self.key = new_key()
        self.name = _name(name)
        self.cert = (x509.CertificateBuilder().subject_name(self.name).issuer_name(self.name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(_NOW - datetime.timedelta(days=1))
                     .not_valid_after(_NOW + datetime.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                     .add_extension(x509.KeyUsage(True, False, False, False, False, True, True,
                                                  False, False), critical=True)
                     .sign(self.key, hashes.SHA256()))

    def issue(self, subject: x509.Name, *, server: bool) -> tuple[x509.Certificate, object]:
        key = new_key()
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(self.name)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(_NOW - datetime.timedelta(days=1))
             .not_valid_after(_NOW + datetime.timedelta(days=30))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                   else ExtendedKeyUsageOID.CLIENT_AUTH]),
                            critical=False))
        if server:
            b = b.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
        return b.sign(self.key, hashes.SHA256()), key


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class Pki:
    """A CA, its server certificate for 127.0.0.1, and client certificates, as files."""

    def __init__(self, folder: Path, *, key_password: bytes | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.authority, self.other = Authority("sparklog test CA"), Authority("unknown CA")
        self.ca = self._write("ca.pem", _pem(self.authority.cert))
        cert, key = self.authority.issue(_name("127.0.0.1"), server=True)
        self.server_cert = self._write("server.pem", _pem(cert))
        self.server_key = self._write("server-key.pem", key_pem(key, key_password))

    def _write(self, name: str, data: bytes) -> str:
        path = self.folder / name
        path.write_bytes(data)
        return str(path)

    def client(self, cn: str, *, org: str = "sparklog tests",
               authority: Authority | None = None, tag: str = "") -> tuple[str, str]:
        """(cert, key) files of a client certificate for ``cn``, signed by ``authority``
        (default: the trusted CA)."""
        cert, key = (authority or self.authority).issue(_name(cn, org), server=False)
        stem = f"client-{tag or cn}"
        return (self._write(f"{stem}.pem", _pem(cert)),
                self._write(f"{stem}-key.pem", key_pem(key)))

    def stranger(self, cn: str) -> tuple[str, str]:
        """A client certificate from a CA the gateway does not trust."""
        return self.client(cn, authority=self.other, tag=f"stranger-{cn}")

    def ssl_settings(self, client_auth: str = "none") -> dict[str, str]:
        """The gateway's ``[ssl]`` settings for this PKI."""
        return {"ssl.certfile": self.server_cert, "ssl.keyfile": self.server_key,
                "ssl.cafile": self.ca, "ssl.client.auth": client_auth}
