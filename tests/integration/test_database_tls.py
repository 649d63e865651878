"""The edge's database connection verifies the server (``verify-full``): against a
PostgreSQL server this module starts with TLS on and a certificate for ``localhost`` that a
CA of its own signs, the edge's URL (built the production way, from the login's secret in
Secrets Manager and ``DB_HOST``) connects by the right name, and is refused by a name the
certificate does not carry, and by the default trust store, which does not hold that CA.

The embedded server is built without OpenSSL; the module runs on PostgreSQL 15's server
binaries (Debian's, the product's target version), skipping with the reason where the
machine has none.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import boto3
import psycopg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from moto import mock_aws

from timekeeper import edge
from timekeeper.db.connection import SSL_MODE, connect
from timekeeper.edge import adapters

PG_BIN = Path(os.environ.get("TIMEKEEPER_TLS_PG_BIN", "/usr/lib/postgresql/15/bin"))
#: The system user that runs the server when the tests run as root (as .ci/run's PostgreSQL 15 pass).
SERVER_USER = "tkpg15"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for DNS name ``localhost`` only (no IP address) it signs:
    returns the paths of the CA's PEM, the server's certificate and its key."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("Timekeeper test CA")).issuer_name(_name("Timekeeper test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    server = (x509.CertificateBuilder().subject_name(_name("localhost")).issuer_name(ca.subject)
              .public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
              .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    paths = folder / "ca.pem", folder / "server.crt", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


def _run_as(user: str | None, command: list[str]) -> None:
    if user is not None:
        command = ["su", user, "-s", "/bin/sh", "-c", " ".join(f"'{part}'" for part in command)]
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise RuntimeError(f"{command} failed: {done.stderr[-2000:]}")


@pytest.fixture(scope="module")
def tls_server():
    """``(port, CA bundle path)`` of a PostgreSQL server listening on 127.0.0.1 with TLS on
    (in a folder of its own outside pytest's, which only root may enter)."""
    if not (PG_BIN / "pg_ctl").is_file():
        pytest.skip(f"no PostgreSQL server binaries with OpenSSL at {PG_BIN}")
    root = Path(tempfile.mkdtemp(prefix="tk-tls-"))
    user = None
    if os.geteuid() == 0:
        user = SERVER_USER
        try:
            pwd.getpwnam(user)
        except KeyError:  # (another test worker may create it at the same moment)
            subprocess.run(["useradd", "--system", "--no-create-home", user], capture_output=True)
            pwd.getpwnam(user)
        shutil.chown(root, user)
        root.chmod(0o755)
    data = root / "data"
    _run_as(user, [str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "utf8"])
    ca, cert, key = _make_certificates(root)
    for path in (cert, key):
        shutil.copy(path, data / path.name)
        if user is not None:
            shutil.chown(data / path.name, user)
    (data / "server.key").chmod(0o600)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = f"-k {root} -h 127.0.0.1 -p {port} -c ssl=on"
    _run_as(user, [str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"])
    try:
        yield port, str(ca)
    finally:
        _run_as(user, [str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"])
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def edge_in_aws(monkeypatch, tls_server):
    """The edge configured as in AWS: the login's secret in Secrets Manager, ``DB_HOST``."""
    port, _ = tls_server
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1",
                       "DB_NAME": "postgres"}.items():
        monkeypatch.setenv(key, value)
    for name in ("AWS_ENDPOINT_URL", "DATABASE_URL", "DB_SSL_ROOT_CERT"):
        monkeypatch.delenv(name, raising=False)
    with mock_aws():
        arn = boto3.client("secretsmanager").create_secret(Name="tk-worker", SecretString=json.dumps(
            {"username": "postgres", "password": "unused-with-trust", "port": port}))["ARN"]
        monkeypatch.setenv("DB_SECRET_ARN", arn)
        edge.reset()
        yield monkeypatch
        edge.reset()


def _connect_as_edge(monkeypatch, *, host: str, root_cert: str | None) -> psycopg.Connection:
    monkeypatch.setenv("DB_HOST", host)
    if root_cert is None:
        monkeypatch.delenv("DB_SSL_ROOT_CERT", raising=False)
    else:
        monkeypatch.setenv("DB_SSL_ROOT_CERT", root_cert)
    edge.reset()
    url = adapters.database_url()
    assert psycopg.conninfo.conninfo_to_dict(url)["sslmode"] == SSL_MODE == "verify-full"
    return connect(url, connect_timeout_s=30)


def test_the_right_host_name_connects_over_verified_tls(edge_in_aws, tls_server):
    with _connect_as_edge(edge_in_aws, host="localhost", root_cert=tls_server[1]) as conn:
        row = conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
    assert row == {"ssl": True}


def test_a_host_name_the_certificate_does_not_carry_is_refused(edge_in_aws, tls_server):
    # The same server and CA, reached by its address, which the certificate does not name
    with pytest.raises(psycopg.OperationalError, match="does not match host name"):
        _connect_as_edge(edge_in_aws, host="127.0.0.1", root_cert=tls_server[1])


def test_the_default_trust_store_refuses_a_certificate_of_another_ca(edge_in_aws, tls_server):
    # certifi's public roots do not hold the test CA: the certificate does not verify
    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        _connect_as_edge(edge_in_aws, host="localhost", root_cert=None)
