"""Routes for the peers' AllowedIPs, added the way wg-quick adds them, and
removed again when the daemon stops.

* ``Table = off``: no routes at all.
* ``Table = N`` (a number, or a name from iproute2's rt_tables files): every
  AllowedIPs network is routed to the interface in table N; nothing else.
* ``Table = auto`` (the default):
  - a network that a route through the interface already covers (the
    Address prefix, say) gets nothing more;
  - any other network gets a route in the main table;
  - a default route (``/0``) goes into its own table: the fwmark's number
    if the interface has one, else the first free number from 51820 (which
    then also becomes the interface's fwmark), with two policy rules:
    ``not fwmark T lookup T`` sends everything but the tunnel's own UDP
    (which carries the mark) into the tunnel, and ``lookup main
    suppress_prefixlength 0`` keeps the main table's more specific routes.
    As wg-quick does, net.ipv4.conf.all.src_valid_mark is set to 1, and an
    nft table per family (tunnelfilter.py) gives the peer's replies the
    fwmark back, for the reverse path check, and keeps the interface's
    addresses from being reached from outside the tunnel.

Routes are applied at startup and after each reload; changes made with
`wg set` do not touch routes (as with wg-quick).  Only what this object
added is removed, with two exceptions for what an earlier run killed with
SIGKILL (or a crash) left behind:

* at startup, remove_leftovers() deletes the interface's routes in every
  table (not the kernel's own: an address's prefix route, the local table;
  with ``Table = off`` only those of an earlier full tunnel's table), every
  ``not fwmark T lookup T`` rule whose table T held only routes through the
  interface (it was this interface's full tunnel) or is empty (its TUN went
  with the kill), with the ``suppress_prefixlength 0`` rule when no other
  full tunnel's rule remains, and the interface's own nft tables.  On a
  persistent TUN the earlier run's default route
  would otherwise keep the host in a tunnel that nothing serves, and its
  `not fwmark T lookup T` rule would capture the new run's UDP, which
  carries another mark;
* before the two policy rules are added, copies of exactly those rules are
  deleted, and on removal every copy goes, as wg-quick's down does.

If the interface was moved to another network namespace, its routes went
with it (the kernel drops them): clear() then removes the rules and the nft
tables, which stay in the daemon's namespace, and says so.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import subprocess
from typing import Any, Callable, Iterable, Optional, Union

from .tunnelfilter import TunnelFilter

Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

log = logging.getLogger("vpncrypt.routes")

FIRST_AUTO_TABLE = 51820
SRC_VALID_MARK = "/proc/sys/net/ipv4/conf/all/src_valid_mark"


class RouteError(OSError):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RouteError(f"`ip {' '.join(args)}` failed: {r.stderr.strip()}")
    return r


def _json(*args: str) -> list[Any]:
    """`ip -j ARGS` parsed ([] if it fails or says nothing)."""
    r = _ip(args[0], "-j", *args[1:], check=False)
    try:
        out = json.loads(r.stdout or "[]")
    except ValueError:
        return []
    return out if isinstance(out, list) else []


def _own_rule(rule: dict[str, Any], table: str) -> bool:
    """Whether an `ip -j rule` entry has the shape of a full tunnel's
    ``not fwmark T lookup T`` (the mark and the table the same number)."""
    try:
        return "not" in rule and int(str(rule.get("fwmark", "")), 0) == int(table)
    except ValueError:
        return False


def _delete_rule_copies(v: str, rule: Iterable[str]) -> int:
    """Delete every copy of an `ip rule` (`ip rule del` takes one at a time),
    as wg-quick's down does; the number deleted."""
    n = 0
    # bounded, in case `ip` ever answered 0 without deleting anything
    while n < 1000 and _ip(v, "rule", "del", *rule, check=False).returncode == 0:
        n += 1
    return n


def _within(net: Network, outer: Network) -> bool:
    """`net` is `outer` or inside it (false across families)."""
    if isinstance(net, ipaddress.IPv4Network) and isinstance(outer, ipaddress.IPv4Network):
        return net.subnet_of(outer)
    if isinstance(net, ipaddress.IPv6Network) and isinstance(outer, ipaddress.IPv6Network):
        return net.subnet_of(outer)
    return False


class Routes:
    def __init__(
        self,
        interface: str,
        table: object,
        *,
        get_fwmark: Callable[[], int],
        set_fwmark: Callable[[int], None],
    ) -> None:
        self.interface = interface
        self.table = table  # the config's Table: None (auto), "off", or a table number or name
        self.get_fwmark = get_fwmark
        self.set_fwmark = set_fwmark
        self.routes: dict[Network, Any] = {}  # network -> table it was added to (None: main)
        self.rules: list[tuple[str, tuple[str, ...]]] = []  # [(family flag, rule args)] in the order added
        self.default_table: Optional[int] = None
        self.filter = TunnelFilter(interface)

    # ------------------------------------------------------------ applying

    def sync(self, networks: Iterable[Network]) -> None:
        """Make the routes those of `networks` (the peers' AllowedIPs).

        The interface's routes are read once and the new ones added with one
        `ip -batch`, so that ten thousand peers cost two commands, not ten
        thousand (wg-quick runs `ip route` once per network)."""
        if self.table == "off":
            return
        want: dict[Network, None] = {}
        for n in networks:
            want.setdefault(ipaddress.ip_network(n, strict=False), None)
        self._remove_routes([n for n in self.routes if n not in want])
        existing = self._interface_routes() if self.table is None else []
        batch: list[tuple[Network, list[str], object]] = []  # (network, `ip` arguments, table)
        # longest prefixes first, as wg-quick (`sort -nr -k 2 -t /`)
        for net in sorted(want, key=lambda n: -n.prefixlen):
            if net in self.routes:
                continue
            if self.table is not None:
                batch.append(
                    (
                        net,
                        ["route", "add", str(net), "dev", self.interface, "table", str(self.table)],
                        self.table,
                    )
                )
            elif net.prefixlen == 0:
                self._add_default(net)
            else:
                cover = next((r for r in existing if _within(net, r)), None)
                if cover is not None:
                    log.debug("route %s: already covered by %s", net, cover)
                    continue
                batch.append((net, ["route", "add", str(net), "dev", self.interface], None))
        if batch:
            r = subprocess.run(
                ["ip", "-batch", "-"],
                capture_output=True,
                text=True,
                input="".join(" ".join(args) + "\n" for _, args, _ in batch),
            )
            if r.returncode != 0:
                # which ones went in: the kernel's word for it
                present = set(self._interface_routes(self.table))
                for net, _, table in batch:
                    if net in present:
                        self.routes[net] = table
                raise RouteError(f"`ip -batch` adding routes failed: {r.stderr.strip()}")
            for net, _, table in batch:
                self.routes[net] = table
            for net, _, table in batch[:20]:
                log.info(
                    "route %s dev %s%s", net, self.interface, f" table {table}" if table is not None else ""
                )
            if len(batch) > 20:
                log.info("... and %d more routes dev %s", len(batch) - 20, self.interface)
        # the full tunnel's nft table, made again after each change: a reload
        # may have changed the interface's addresses
        mark = self.default_table  # set by _add_default, with the first default route
        if mark is not None and self.table is None:
            for net in [n for n in self.routes if n.prefixlen == 0]:
                self.filter.apply(net.version, mark)

    def _interface_routes(self, table: object = None) -> list[Network]:
        """The networks routed through the interface (main table, or `table`)."""
        out: list[Network] = []
        for v in ("-4", "-6"):
            args = [v, "-j", "route", "show", "dev", self.interface]
            if table is not None:
                args += ["table", str(table)]
            r = _ip(*args, check=False)
            try:
                entries = json.loads(r.stdout or "[]")
            except ValueError:
                entries = []
            for e in entries:
                dst = e.get("dst")
                if not dst or dst == "default":
                    continue
                try:
                    out.append(
                        ipaddress.ip_network(
                            dst if "/" in dst else f"{dst}/{32 if v == '-4' else 128}", strict=False
                        )
                    )
                except ValueError:
                    continue
        return out

    def _add_default(self, net: Network) -> None:
        table = self.default_table
        if table is None:
            table = self.get_fwmark()
            if not table:
                table = FIRST_AUTO_TABLE
                while (
                    _ip("-4", "route", "show", "table", str(table), check=False).stdout.strip()
                    or _ip("-6", "route", "show", "table", str(table), check=False).stdout.strip()
                ):
                    table += 1
                self.set_fwmark(table)
                log.info("fwmark 0x%x on the tunnel's UDP socket, so that it bypasses table %d", table, table)
            self.default_table = table
        v = f"-{net.version}"
        for rule in (
            ("not", "fwmark", str(table), "table", str(table)),
            ("table", "main", "suppress_prefixlength", "0"),
        ):
            if (v, rule) not in self.rules:
                # copies left by a daemon that was killed (SIGKILL, a crash)
                # would otherwise stay for good, one more pair per restart
                stale = _delete_rule_copies(v, rule)
                if stale:
                    log.info(
                        "removed %d leftover %s of `ip %s rule %s`",
                        stale,
                        "copy" if stale == 1 else "copies",
                        v,
                        " ".join(rule),
                    )
                _ip(v, "rule", "add", *rule)
                self.rules.append((v, rule))
                log.info("ip %s rule add %s", v, " ".join(rule))
        if net.version == 4:
            try:
                with open(SRC_VALID_MARK, "w") as f:
                    f.write("1")
            except OSError as e:
                log.warning(
                    "cannot set %s (%s): replies may be filtered by the reverse path check",
                    SRC_VALID_MARK,
                    e.strerror,
                )
        _ip(v, "route", "add", str(net), "dev", self.interface, "table", str(table))
        self.routes[net] = table

    # ------------------------------------------------------------ leftovers

    def remove_leftovers(self) -> None:
        """Delete what an earlier run on this interface left behind (see the
        module's text); before the first sync().  The interface's own routes
        are listed (not every table's: a host may hold a full BGP table), and
        deleted with one `ip -batch`."""
        self.filter.remove_leftovers()
        for version in (4, 6):
            v = f"-{version}"
            # (`dev` given, iproute2 leaves it out of each entry)
            mine = _json(v, "route", "show", "table", "all", "dev", self.interface)
            owned = set()
            for table in {str(r.get("table", "main")) for r in mine} - {"main", "local", "default"}:
                if all(r.get("dev") == self.interface for r in _json(v, "route", "show", "table", table)):
                    owned.add(table)
            # a full tunnel's rule over a table left empty (its non-persistent
            # TUN went with the kill, and the kernel took the routes): dead
            # weight that no restart would otherwise remove
            rules = _json(v, "rule", "show")
            for rule in rules:
                table = str(rule.get("table", ""))
                if (
                    table.isdigit()
                    and table not in owned
                    and _own_rule(rule, table)
                    and not _json(v, "route", "show", "table", table)
                ):
                    owned.add(table)
            gone = []
            for r in mine:
                table = str(r.get("table", "main"))
                if table == "local" or r.get("protocol") == "kernel":
                    continue
                if self.table == "off" and table not in owned:
                    continue  # `Table = off`: only an earlier full tunnel's table
                args = ["route", "del"]
                if r.get("type") not in (None, "unicast"):
                    args.append(r["type"])
                args += [r.get("dst", "default"), "dev", self.interface, "table", table]
                if "metric" in r:
                    args += ["metric", str(r["metric"])]
                gone.append((f"{r.get('dst', 'default')} table {table}", args))
            if gone:
                res = subprocess.run(
                    ["ip", "-force", v, "-batch", "-"],
                    capture_output=True,
                    text=True,
                    input="".join(" ".join(a) + "\n" for _, a in gone),
                )
                if res.returncode != 0:
                    log.warning(
                        "removing leftover IPv%d routes dev %s: %s",
                        version,
                        self.interface,
                        res.stderr.strip()[:500],
                    )
                log.info(
                    "removed %d leftover IPv%d route%s dev %s (an earlier run): %s%s",
                    len(gone),
                    version,
                    "" if len(gone) == 1 else "s",
                    self.interface,
                    ", ".join(w for w, _ in gone[:10]),
                    ", ..." if len(gone) > 10 else "",
                )
            removed_full_tunnel = False
            for rule in rules:
                table = str(rule.get("table", ""))
                if table not in owned or "priority" not in rule or not _own_rule(rule, table):
                    continue
                res = _ip(v, "rule", "del", "priority", str(rule["priority"]), "table", table, check=False)
                if res.returncode == 0:
                    removed_full_tunnel = True
                    log.info(
                        "removed the leftover rule `ip %s rule ... lookup %s` (priority %d): "
                        "table %s was %s's full tunnel",
                        v,
                        table,
                        rule["priority"],
                        table,
                        self.interface,
                    )
            if removed_full_tunnel and not any(
                "not" in r and "fwmark" in r for r in _json(v, "rule", "show")
            ):
                # the earlier run's `lookup main suppress_prefixlength 0`, unless
                # another full tunnel (wg-quick's, say) still relies on one
                n = _delete_rule_copies(v, ("table", "main", "suppress_prefixlength", "0"))
                if n:
                    log.info("removed %d leftover `ip %s rule ... suppress_prefixlength 0`", n, v)

    # ------------------------------------------------------------ removing

    def _remove_routes(self, nets: list[Network]) -> None:
        """Remove routes this object added: a full tunnel's default route
        with its rules and nft table, one by one; all the others with one
        `ip -force -batch` (a reload from ten thousand peers to one, or a
        stop, is one command, not ten thousand, as adding them is)."""
        plain = []
        for net in nets:
            if net.prefixlen == 0 and self.table is None:
                self._remove_route(net)
            else:
                plain.append(net)
        if not plain:
            return
        lines = []
        for net in plain:
            table = self.routes.pop(net)
            args = ["route", "del", str(net), "dev", self.interface]
            if table is not None:
                args += ["table", str(table)]
            lines.append(" ".join(args) + "\n")
        r = subprocess.run(
            ["ip", "-force", "-batch", "-"], capture_output=True, text=True, input="".join(lines)
        )
        if r.returncode != 0:
            # a route already gone (with its interface, or by hand) is no error
            errors = [
                e
                for e in r.stderr.splitlines()
                if e.strip()
                and not e.startswith("Command failed")
                and "No such" not in e
                and "Cannot find" not in e
            ]
            if errors:
                log.warning(
                    "removing %d route(s) dev %s: %s", len(plain), self.interface, "; ".join(errors[:5])[:500]
                )

    def _remove_route(self, net: Network) -> None:
        table = self.routes.pop(net)
        args = [f"-{net.version}", "route", "del", str(net), "dev", self.interface]
        if table is not None:
            args += ["table", str(table)]
        r = _ip(*args, check=False)
        if r.returncode != 0 and "No such" not in r.stderr and "Cannot find" not in r.stderr:
            log.warning("cannot remove route %s: %s", net, r.stderr.strip())
        if net.prefixlen == 0 and self.table is None:
            v = f"-{net.version}"
            for rule in [r for r in self.rules if r[0] == v]:
                _delete_rule_copies(*rule)
                self.rules.remove(rule)
            self.filter.remove(net.version)

    def clear(self, interface_here: bool = True) -> None:
        """Remove every route and rule this object added (the routes may
        already be gone with the interface; the rules never go by themselves).
        `interface_here` False: the interface is in another network
        namespace, so its routes went with it, and a route through an
        interface of the same name here is not ours to delete."""
        if not interface_here:
            if self.routes:
                log.info(
                    "%s is in another network namespace: its %d route(s) went with it; "
                    "removing the policy rules and nft tables here",
                    self.interface,
                    len(self.routes),
                )
            for net in [n for n in self.routes if n.prefixlen == 0 and self.table is None]:
                self.filter.remove(net.version)
            self.routes.clear()
        self._remove_routes(list(self.routes))
        for v, rule in self.rules:
            _delete_rule_copies(v, rule)
        self.rules.clear()
        self.filter.clear()
