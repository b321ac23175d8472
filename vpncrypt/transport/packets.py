"""Inner IP headers and WireGuard's padding rule, for the reference table
(native/wg_data.c has the same two)."""


def inner_address(pkt: bytes | bytearray | memoryview, destination: bool) -> tuple[int, bytes | None, int]:
    """(family, address bytes, IP length) of a whole IPv4/IPv6 packet, its
    source or destination; (0, None, 0) if it is not one."""
    n = len(pkt)
    if n >= 20 and pkt[0] >> 4 == 4:
        total = (pkt[2] << 8) | pkt[3]
        if total < 20 or total > n:
            return 0, None, 0
        at = 16 if destination else 12
        return 4, bytes(pkt[at : at + 4]), total
    if n >= 40 and pkt[0] >> 4 == 6:
        total = 40 + ((pkt[4] << 8) | pkt[5])
        if total > n:
            return 0, None, 0
        at = 24 if destination else 8
        return 6, bytes(pkt[at : at + 16]), total
    return 0, None, 0


def padded_length(length: int, mtu: int) -> int:
    """The plaintext length after padding: a multiple of 16, never past the
    MTU (a packet longer than the MTU is padded as its last MTU-sized unit
    would be), as wireguard-go's calculatePaddingSize."""
    if not mtu:
        return (length + 15) & ~15
    last = length % mtu if length > mtu else length
    padded = min((last + 15) & ~15, mtu)
    return length + padded - last
