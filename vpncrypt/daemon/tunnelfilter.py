"""The nftables table that goes with a full tunnel (a ``/0`` in Table =
auto), one per address family, as wg-quick adds it:

* chain ``preraw`` (prerouting, priority raw): a packet for one of the
  interface's own addresses that did not come in through the interface, and
  whose source is not local, is dropped.  Without it a neighbour on the LAN
  could reach the tunnel address from outside the tunnel.
* chain ``premangle`` (prerouting, priority mangle): incoming UDP takes the
  connection's mark.  The peer's replies to the tunnel's own (marked) UDP
  then carry the fwmark, so that with src_valid_mark=1 the reverse path
  check looks them up as the policy rules route the tunnel's UDP (through the
  main table) and not into the tunnel: a host with strict rp_filter would
  otherwise drop every reply and no handshake would complete.
* chain ``postmangle`` (postrouting, priority mangle): outgoing UDP with the
  tunnel's fwmark saves the mark on its connection, for the rule above.

The table is named ``vpncrypt-IFACE`` and replaced as a whole in one `nft`
transaction (so a copy left by a daemon that was killed goes away first), and
deleted when the ``/0`` goes away or the daemon stops.  Without `nft` a
warning says what is missing.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import shutil
import subprocess
from collections.abc import Iterable
from typing import Union

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

log = logging.getLogger("vpncrypt.routes")

FAMILIES = {4: "ip", 6: "ip6"}


class FilterError(OSError):
    pass


def table_name(interface: str) -> str:
    # nft identifiers take letters, digits and _.-; an interface name may
    # also have + and = (as wg-quick allows)
    return "vpncrypt-" + re.sub(r"[^A-Za-z0-9_.-]", "_", interface)


def interface_addresses(interface: str, version: int) -> list[IPAddress]:
    r = subprocess.run(
        ["ip", f"-{version}", "-j", "address", "show", "dev", interface], capture_output=True, text=True
    )
    try:
        links = json.loads(r.stdout or "[]")
    except ValueError:
        links = []
    out: list[IPAddress] = []
    for link in links:
        for a in link.get("addr_info", []):
            try:
                out.append(ipaddress.ip_address(a["local"]))
            except (KeyError, ValueError):
                continue
    return out


def script(interface: str, version: int, mark: int, addresses: Iterable[IPAddress]) -> str:
    """The `nft -f` input that (re)creates the table for one family."""
    pf, name = FAMILIES[version], table_name(interface)
    drops = "".join(
        f'    iifname != "{interface}" {pf} daddr {a} fib saddr type != local drop\n' for a in addresses
    )
    return (
        f"table {pf} {name}\n"
        f"delete table {pf} {name}\n"
        f"table {pf} {name} {{\n"
        f"  chain preraw {{\n"
        f"    type filter hook prerouting priority raw; policy accept;\n"
        f"{drops}"
        f"  }}\n"
        f"  chain premangle {{\n"
        f"    type filter hook prerouting priority mangle; policy accept;\n"
        f"    meta l4proto udp meta mark set ct mark\n"
        f"  }}\n"
        f"  chain postmangle {{\n"
        f"    type filter hook postrouting priority mangle; policy accept;\n"
        f"    meta l4proto udp meta mark {mark} ct mark set meta mark\n"
        f"  }}\n"
        f"}}\n"
    )


class TunnelFilter:
    def __init__(self, interface: str):
        self.interface = interface
        self.families: set[int] = set()  # versions whose table is in place
        self._warned = False

    def apply(self, version: int, mark: int) -> None:
        """Create (or replace, with the interface's current addresses) the
        table for IPv`version`."""
        nft = shutil.which("nft")
        if nft is None:
            if not self._warned:
                log.warning(
                    "nft not found: no rule restores the fwmark on the peer's replies, "
                    "so a host with strict reverse path filtering (rp_filter=1) drops "
                    "them and the full tunnel never completes a handshake; and the "
                    "rule that keeps LAN neighbours from reaching %s's addresses from "
                    "outside the tunnel is absent (install nftables)",
                    self.interface,
                )
                self._warned = True
            return
        text = script(self.interface, version, mark, interface_addresses(self.interface, version))
        r = subprocess.run([nft, "-f", "-"], input=text, capture_output=True, text=True)
        if r.returncode != 0:
            raise FilterError(
                f"`nft -f -` adding table {FAMILIES[version]} "
                f"{table_name(self.interface)} failed: {r.stderr.strip()}"
            )
        if version not in self.families:
            log.info(
                "nft table %s %s: fwmark %d restored on incoming UDP; %s's addresses "
                "reachable only through it",
                FAMILIES[version],
                table_name(self.interface),
                mark,
                self.interface,
            )
        self.families.add(version)

    def remove(self, version: int) -> None:
        if version not in self.families:
            return
        self.families.discard(version)
        r = subprocess.run(
            ["nft", "delete", "table", FAMILIES[version], table_name(self.interface)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0 and "No such file" not in r.stderr:
            log.warning(
                "cannot delete nft table %s %s: %s",
                FAMILIES[version],
                table_name(self.interface),
                r.stderr.strip(),
            )

    def clear(self) -> None:
        for version in list(self.families):
            self.remove(version)

    def remove_leftovers(self) -> int:
        """Delete this interface's tables that an earlier run (killed, or
        crashed) left behind; before the first apply().  The number deleted."""
        nft = shutil.which("nft")
        if nft is None:
            return 0
        n = 0
        for version in (4, 6):
            if version in self.families:
                continue
            r = subprocess.run(
                [nft, "delete", "table", FAMILIES[version], table_name(self.interface)],
                capture_output=True,
                text=True,
            )
            if r.returncode == 0:
                n += 1
                log.info(
                    "removed the leftover nft table %s %s (an earlier run)",
                    FAMILIES[version],
                    table_name(self.interface),
                )
        return n
