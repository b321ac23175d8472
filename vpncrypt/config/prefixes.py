"""IP prefixes (``address/bits``) as AllowedIPs, Address and the UAPI
``allowed_ip=`` write them, under one rule for files and UAPI alike.

The address is a plain numeric IPv4 or IPv6 address: no zone (``%eth0``),
which neither `wg` (inet_pton) nor wireguard-go (netip.ParsePrefix) takes.
The prefix length is ASCII decimal digits without a leading zero (``/0``
but not ``/00`` or ``/024``), 0-32 for IPv4 and 0-128 for IPv6: no netmask
(``/255.255.0.0``), no sign, no other script's digits. That is wireguard-go's
rule; `wg` also takes a leading zero in a file (strtoul), which vpncrypt
refuses there as well, so that a prefix means the same in a file and over
the UAPI.
"""

from __future__ import annotations

import ipaddress
import socket


def _decimal(text: str) -> bool:
    """ASCII decimal digits without a leading zero (str.isdigit() alone would
    take '²' or Arabic-Indic digits)."""
    return text.isascii() and text.isdigit() and (len(text) == 1 or text[0] != "0")


def split_prefix(text: str, *, need_bits: bool) -> tuple:
    """(address, bits) of ``text``; bits default to the full length (32 or
    128) when there is no ``/`` and ``need_bits`` is false. Raises
    ValueError with a short reason."""
    addr_text, slash, bits_text = text.partition("/")
    if not slash and need_bits:
        raise ValueError("expected address/prefix length")
    if "%" in addr_text:
        raise ValueError("an address with a zone (%...) cannot be a prefix")
    try:
        addr = ipaddress.ip_address(addr_text)
    except ValueError:
        raise ValueError("not a numeric IP address") from None
    if not slash:
        return addr, addr.max_prefixlen
    if not _decimal(bits_text):
        raise ValueError(
            f"the prefix length must be a number 0-{addr.max_prefixlen} (decimal, no leading zero)"
        )
    bits = int(bits_text)
    if bits > addr.max_prefixlen:
        raise ValueError(f"the prefix length must be 0-{addr.max_prefixlen}")
    return addr, bits


def parse_network(text: str, *, need_bits: bool = False) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """An IPv4Network/IPv6Network with the host bits cleared."""
    fast = _ipv4_network(text)
    if fast is not None:
        return fast
    return ipaddress.ip_network(split_prefix(text, need_bits=need_bits), strict=False)


def _ipv4_network(text: str) -> ipaddress.IPv4Network | None:
    """The common case, ``a.b.c.d/n``, without the ipaddress module's string
    parsing (a UAPI request may carry hundreds of thousands of them, parsed
    on the event loop): inet_pton takes exactly the dotted quads that
    ip_address takes (no leading zeros, no shorthand).  None for anything
    else, which split_prefix then judges (and explains)."""
    addr_text, slash, bits_text = text.partition("/")
    if not (slash and _decimal(bits_text)) or int(bits_text) > 32:
        return None
    bits = int(bits_text)
    try:
        packed = socket.inet_pton(socket.AF_INET, addr_text)
    except OSError:
        return None
    mask = (0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF
    return ipaddress.IPv4Network((int.from_bytes(packed, "big") & mask, bits))


def parse_interface(text: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """An IPv4Interface/IPv6Interface (an address with its prefix length)."""
    return ipaddress.ip_interface(split_prefix(text, need_bits=False))
