"""A Kafka node of its own for the secured-broker tests: clients reach it only through a SASL_SSL
listener (SCRAM-SHA-512 over TLS, with a CA and a server certificate made here), and Kafka's
StandardAuthorizer allows each principal only what its ACLs grant.

The controller and the node's own (inter-broker) traffic stay on a PLAINTEXT listener bound to
127.0.0.1: on that listener the node is `User:ANONYMOUS`, a super user, as the node itself must be
before any ACL is loaded."""

from __future__ import annotations

import datetime
import ipaddress
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from compose.procs import free_port
from tests.support.kafka_node import OwnKafka

ADMIN = "admin"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_certificates(directory: Path) -> tuple[Path, Path]:
    """A CA, and the broker's key and certificate (for 127.0.0.1 and localhost) signed by it:
    returns the CA's certificate (PEM, the clients' ssl.ca.location) and the broker's PEM
    keystore (its private key, then its certificate chain)."""
    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder()
          .subject_name(_name("bottler test CA")).issuer_name(_name("bottler test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(valid[0]).not_valid_after(valid[1])
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(
              digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
              key_encipherment=False, data_encipherment=False, key_agreement=False,
              encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(_name("kafka")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(valid[0]).not_valid_after(valid[1])
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    ca_file, keystore = directory / "ca.pem", directory / "broker.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    keystore.write_bytes(_pem_key(key) + cert.public_bytes(serialization.Encoding.PEM)
                         + ca.public_bytes(serialization.Encoding.PEM))
    keystore.chmod(0o600)
    return ca_file, keystore


@dataclass
class SecuredKafka:
    """The running node: its SASL_SSL address, its CA, and the users' passwords."""

    bootstrap: str
    ca: Path
    passwords: dict[str, str] = field(default_factory=dict)
    log: Path | None = None

    def client(self, user: str, password: str | None = None) -> dict[str, str]:
        """librdkafka's properties for ``user`` (with ``password``, else the user's own)."""
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                "sasl.password": password or self.passwords[user],
                "ssl.ca.location": str(self.ca)}

    def add_user(self, user: str) -> str:
        """A new SCRAM-SHA-512 user, made by the admin over SASL_SSL; returns its password."""
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        password = "Pw" + secrets.token_hex(12)
        admin = AdminClient(self.client(ADMIN))
        upsert = UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)
        self.passwords[user] = password
        return password


@contextmanager
def secured_kafka() -> Iterator[SecuredKafka]:
    """A one-node Kafka whose clients must use SASL_SSL; stopped and removed at the end."""
    with tempfile.TemporaryDirectory(prefix="bottler-secured-") as home:
        home = Path(home)
        ca, keystore = make_certificates(home)
        internal, controller, secured = free_port(), free_port(), free_port()
        admin_password = "Pw" + secrets.token_hex(12)
        settings = {
            "listeners": f"PLAINTEXT://127.0.0.1:{internal},"
                         f"CONTROLLER://127.0.0.1:{controller},SASL_SSL://127.0.0.1:{secured}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{internal},"
                                    f"SASL_SSL://127.0.0.1:{secured}",
            "listener.security.protocol.map":
                "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            # the server side of SCRAM needs no options: the credentials are in the metadata
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca),
            "authorizer.class.name":
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # the node itself, on its loopback PLAINTEXT listener, and the operator
            "super.users": f"User:ANONYMOUS;User:{ADMIN}",
            "allow.everyone.if.no.acl.found": "false",
        }
        kafka = OwnKafka(home, internal, controller, settings, {ADMIN: admin_password})
        kafka.start()
        try:
            yield SecuredKafka(f"127.0.0.1:{secured}", ca, {ADMIN: admin_password}, kafka.log)
        finally:
            kafka.stop()
