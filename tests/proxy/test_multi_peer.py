"""Two peers, each chosen by its AllowedIPs: a second wireguard-go (its own
namespace, its own 3 MiB file) beside the lab's, both reached through one
proxy; each file comes whole from its own peer."""

from tests.proxy.test_traffic import fetch


def test_peers_chosen_by_allowed_ips(lab, tmp_path):
    b = lab.add_site("b", 1)
    key = lab.add_peer("10.77.0.6")
    lab.world.wg_set(b.peer, "peer", key[1], "allowed-ips", "10.77.0.6/32")
    lab.world.ip("b", "route", "add", "10.77.0.6/32", "dev", b.peer.iface)
    text = (
        f"[Interface]\nAddress = 10.77.0.6/32\nPrivateKey = {key[0]}\n\n"
        f"[Peer]\nPublicKey = {lab.peer_key[1]}\nEndpoint = 172.31.0.1:51820\nAllowedIPs = 10.77.0.0/24\n\n"
        f"[Peer]\nPublicKey = {b.key[1]}\nEndpoint = {b.endpoint}\nAllowedIPs = 10.78.0.0/24\n\n"
        "[Socks5]\nBindAddress = 127.0.0.1:1095\n"
    )
    lab.start_proxy("multi", text)
    fetch(lab, tmp_path, "--socks5", "127.0.0.1:1095", "http://10.78.0.1:8000/blob", blob=b.blob)
    fetch(lab, tmp_path, "--socks5", "127.0.0.1:1095", "http://10.77.0.1:8000/blob", blob=lab.blob)
    with open(b.blob, "rb") as one, open(lab.blob, "rb") as other:
        assert one.read() != other.read()
