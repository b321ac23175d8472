"""One lab (a wireguard-go peer, the proxy's namespace) for the directory's
tests, and one proxy in it with every front end of wireproxy's config; the
tests that need a proxy of their own start it in the same lab."""

import pytest

from tests.proxy.lab import ECHO_PORT, ProxyLab

SOCKS_PORT, AUTH_SOCKS_PORT, HTTP_PORT, AUTH_HTTP_PORT, FORWARD_PORT, SERVER_PORT = (
    1080,
    1081,
    3128,
    3129,
    8081,
    9000,
)
USER, PASSWORD = "alice", "s3cret pass"


def front(kind: str, port: int, auth: bool = False) -> str:
    creds = f"Username = {USER}\nPassword = {PASSWORD}\n" if auth else ""
    return f"[{kind}]\nBindAddress = 127.0.0.1:{port}\n{creds}\n"


FRONTS = (
    front("Socks5", SOCKS_PORT)
    + front("Socks5", AUTH_SOCKS_PORT, auth=True)
    + front("http", HTTP_PORT)
    + front("http", AUTH_HTTP_PORT, auth=True)
    + f"[TCPClientTunnel]\nBindAddress = 127.0.0.1:{FORWARD_PORT}\nTarget = 10.77.0.1:8000\n\n"
    + f"[TCPServerTunnel]\nListenPort = {SERVER_PORT}\nTarget = 127.0.0.1:{ECHO_PORT}\n"
)


@pytest.fixture(scope="session")
def lab():
    lab = ProxyLab()
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture(scope="session")
def proxy(lab):
    """The main proxy: 10.77.0.2 and fd77::2 in the tunnel."""
    key = lab.add_peer("10.77.0.2", "fd77::2")
    proxy = lab.start_proxy("wireproxy", lab.config(key, "10.77.0.2", FRONTS))
    proxy.key = key
    return proxy
