"""What the metrics tests need for TLS and basic auth: a CA and a server
certificate made at run time (the `cryptography` package), and an exporter
web config file that names them, with a bcrypt hash."""

import datetime
import os

import bcrypt


def certificates(folder):
    """A CA, and a server certificate for 127.0.0.1 signed by it: (ca file,
    cert file, key file), PEM."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "vpncrypt test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = {}
    for name, data in (
        ("ca.pem", ca.public_bytes(serialization.Encoding.PEM)),
        ("server.pem", cert.public_bytes(serialization.Encoding.PEM)),
        (
            "server.key",
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        ),
    ):
        files[name] = os.path.join(folder, name)
        with open(files[name], "wb") as f:
            f.write(data)
        os.chmod(files[name], 0o600)
    return files["ca.pem"], files["server.pem"], files["server.key"]


PASSWORD = "correct horse battery staple"


def web_config(lab, name="web.yml", *, tls=True, users=True, mode=0o600, extra=""):
    """A web config file in the lab's folder (TLS for 127.0.0.1 and the user
    "scraper" with PASSWORD), and the CA file that checks its certificate."""
    folder = os.path.join(lab.tmp, "web")
    os.makedirs(folder, exist_ok=True)
    ca, cert, key = certificates(folder)
    text = ""
    if tls:
        text += f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
    if users:
        # cost 4, bcrypt's least: the test's scrapes need not take 70 ms each
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
        text += f"basic_auth_users:\n  scraper: {hashed}\n"
    text += extra
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path, ca
