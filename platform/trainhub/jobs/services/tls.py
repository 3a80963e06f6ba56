"""A job's TLS material for its runtime gRPC: issued, stored sealed, handed to its nodes.

When a job is placed (`issue_job_ca`), `TRAINHUB_RUNTIME_TLS` and its nodes' addresses
decide whether it gets TLS (`pki.tls_wanted`); if so it gets a CA of its own, signed the
first time one of its nodes asks for its tasks (`node_material`: a cycle that starts
thousands of jobs signs none of them, 0.4 ms each). Two nodes asking at once get the
same CA: only the first to write it wins, the other reads it. Each node's certificate
(SAN: the node's address) is issued the first time that node is told to run one of the
job's tasks, so a worker added on a new node later gets one too. Private keys are stored
encrypted with a key derived from `SECRET_KEY` (and `SECRET_KEY_FALLBACKS`, to rotate
it); they appear only in the desired-tasks answer to the node that runs the task, never
in a log or a user's API answer.
"""

from __future__ import annotations

import base64
import logging
from datetime import datetime

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.db import IntegrityError, transaction

from ps_runtime.agent.protocol import TaskTLS

from .. import pki
from ..models import Job, RuntimeCA, RuntimeCertificate

logger = logging.getLogger(__name__)

_PURPOSE = b"trainhub runtime tls private keys"


class SealError(RuntimeError):
    """A stored key cannot be decrypted: the secret key changed without a fallback."""


def _fernet() -> MultiFernet:
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    keys = []
    for secret in secrets:
        derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_PURPOSE).derive(
            str(secret).encode()
        )
        keys.append(Fernet(base64.urlsafe_b64encode(derived)))
    return MultiFernet(keys)


def seal(text: str) -> str:
    """`text` encrypted and authenticated under the server's secret key."""
    return _fernet().encrypt(text.encode()).decode()


def unseal(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise SealError(
            "a stored runtime TLS key cannot be decrypted: TRAINHUB_SECRET_KEY changed; "
            "keep the old one in TRAINHUB_SECRET_KEY_FALLBACKS until the job is placed again"
        ) from None


def issue_job_ca(job: Job, hosts: list[str], now: datetime) -> bool:
    """Give `job`, about to run on `hosts`, a CA when it should have TLS (keeping one it
    already has), or take its CA away when it should not. True when it has TLS.

    Called by placement, which restarts every task of the job, so a change either way
    reaches all of them together."""
    if not pki.tls_wanted(settings.RUNTIME_TLS, hosts):
        RuntimeCA.objects.filter(job=job).delete()
        RuntimeCertificate.objects.filter(job=job).delete()
        return False
    RuntimeCA.objects.get_or_create(job=job, defaults={"cert": UNSIGNED, "sealed_key": ""})
    return True


UNSIGNED = ""  # the cert of a job's CA that no node has asked for yet


def _signed(ca: RuntimeCA, now: datetime) -> RuntimeCA:
    """`ca`, signed now unless another request signed it first (then theirs)."""
    issued = pki.issue_ca(ca.job_id, now)
    sealed = seal(issued.key)
    won = RuntimeCA.objects.filter(job_id=ca.job_id, cert=UNSIGNED).update(
        cert=issued.cert, sealed_key=sealed
    )
    if not won:
        return RuntimeCA.objects.get(job_id=ca.job_id)
    logger.info("job %s: issued its runtime CA (TLS between its tasks)", ca.job_id)
    ca.cert, ca.sealed_key = issued.cert, sealed
    return ca


def node_material(job_ids: set[int], host: str, now: datetime) -> dict[int, TaskTLS]:
    """What the tasks of `job_ids` on the node at `host` need for TLS, by job (jobs
    without a CA are absent: their tasks speak plaintext). Issues the node's certificate
    of a job the first time it is asked for."""
    cas = {ca.job_id: ca for ca in RuntimeCA.objects.filter(job_id__in=job_ids)}
    if not cas:
        return {}
    for job_id, ca in cas.items():
        if ca.cert == UNSIGNED:
            cas[job_id] = _signed(ca, now)
    certs = {
        c.job_id: c for c in RuntimeCertificate.objects.filter(job_id__in=list(cas), host=host)
    }
    material: dict[int, TaskTLS] = {}
    for job_id, ca in cas.items():
        cert = certs.get(job_id) or _issue_certificate(ca, host, now)
        material[job_id] = TaskTLS(cert=cert.cert, key=unseal(cert.sealed_key), ca=ca.cert)
    return material


def _issue_certificate(ca: RuntimeCA, host: str, now: datetime) -> RuntimeCertificate:
    leaf = pki.issue_leaf(pki.Issued(ca.cert, unseal(ca.sealed_key)), host, now)
    try:
        with transaction.atomic():
            cert = RuntimeCertificate.objects.create(
                job_id=ca.job_id, host=host, cert=leaf.cert, sealed_key=seal(leaf.key)
            )
    except IntegrityError:  # another request for the same node issued it first
        return RuntimeCertificate.objects.get(job_id=ca.job_id, host=host)
    logger.info("job %s: issued the runtime certificate for %s", ca.job_id, host)
    return cert
