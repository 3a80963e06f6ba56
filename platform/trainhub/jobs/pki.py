"""Certificates for a job's runtime gRPC: a CA of its own and one leaf per node address.

Pure `cryptography`, no Django: `trainhub.jobs.services.tls` stores what this issues, and
tests use it to give in-process servers the material the platform would. Keys are ECDSA
P-256 (fast to make, what gRPC's TLS prefers); every certificate starts an hour early so
a node whose clock is slightly behind accepts it.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# How long a job's CA and its leaves are valid; a job running longer gets new ones when
# it is placed again (a preempted or restarted job).
VALIDITY = timedelta(days=365)
CLOCK_SKEW = timedelta(hours=1)
MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, both PEM."""

    cert: str
    key: str

    def __repr__(self) -> str:  # never print the private key by accident
        return "Issued(cert=<pem>, key=***)"

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert.encode())


@functools.lru_cache(maxsize=4096)  # a cycle asks it for every job it starts
def is_loopback(host: str) -> bool:
    """Whether `host` (a node address) can only be reached from the same machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def tls_wanted(mode: str, hosts: list[str]) -> bool:
    """Whether a job whose tasks run on `hosts` gets TLS under `TRAINHUB_RUNTIME_TLS`:
    `on` always, `off` never, `auto` unless every host is a loopback address."""
    if mode not in MODES:
        raise ValueError(f"TRAINHUB_RUNTIME_TLS={mode!r} must be one of {MODES}")
    if mode == "auto":
        return not all(is_loopback(h) for h in hosts)
    return mode == "on"


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "TrainHub"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def issue_ca(job_id: int, now: datetime) -> Issued:
    """A CA that signs only this job's leaves (path length 0)."""
    key = _new_key()
    name = _name(f"TrainHub job {job_id} runtime CA")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM).decode(), _pem(key))


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return x509.DNSName(host)


def issue_leaf(ca: Issued, host: str, now: datetime) -> Issued:
    """A certificate for the tasks of the CA's job on the node reachable at `host` (an IP
    address or a DNS name, as the node enrolled it): servers there present it, and a
    client's host check against `host:port` in the cluster spec matches it."""
    ca_cert = ca.certificate
    ca_key = serialization.load_pem_private_key(ca.key.encode(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("a job CA's key is ECDSA")
    key = _new_key()
    not_after = min(now + VALIDITY, ca_cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(host))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([_san(host)]), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM).decode(), _pem(key))
