"""A Beaker endpoint that answers every call with one gRPC status over TLS: what the Beaker client meets when the
service refuses its token or is down, met at the network boundary by the real client (beaker-py, grpc).

The certificate is made for the test (``localhost``); :attr:`BeakerEndpoint.env` points the client at the
endpoint (a Beaker config file with the endpoint's address and a token) and makes gRPC trust that certificate.
"""

from __future__ import annotations

import datetime
from concurrent.futures import ThreadPoolExecutor

import grpc
import yaml


def self_signed(host: str = "localhost") -> tuple[bytes, bytes]:
    """A private key and a certificate for ``host``, PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return (key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()),
            cert.public_bytes(serialization.Encoding.PEM))


class BeakerEndpoint:
    """Answers every call with ``code`` and ``details``; records the methods called."""

    def __init__(self, folder, code: grpc.StatusCode, details: str, token: str = "not-a-real-token"):
        self.folder, self.code, self.details, self.token = folder, code, details, token
        self.calls: list[str] = []

    def __enter__(self) -> BeakerEndpoint:
        endpoint = self

        class Refuse(grpc.GenericRpcHandler):
            def service(self, call_details):
                endpoint.calls.append(call_details.method)

                def answer(request, context):
                    context.abort(endpoint.code, endpoint.details)

                return grpc.unary_unary_rpc_method_handler(answer)

        key, cert = self_signed()
        self.server = grpc.server(ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers([Refuse()])
        port = self.server.add_secure_port("localhost:0", grpc.ssl_server_credentials([(key, cert)]))
        self.server.start()
        self.address = f"localhost:{port}"
        (self.folder / "ca.pem").write_bytes(cert)
        (self.folder / "beaker.yml").write_text(yaml.safe_dump(
            {"user_token": self.token, "rpc_address": self.address, "agent_address": f"https://{self.address}"}))
        return self

    @property
    def env(self) -> dict[str, str]:
        return {"BEAKER_CONFIG": str(self.folder / "beaker.yml"),
                "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(self.folder / "ca.pem")}

    def __exit__(self, *exc) -> None:
        self.server.stop(grace=None)
