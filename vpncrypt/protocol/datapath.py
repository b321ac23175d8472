"""The Device's data side: inner packets to the session table and back, the
packets that wait for a handshake, keepalives, and what the table's batch
results mean for the protocol (timers, key confirmation, rekeying).

The native data plane seals and opens without this module; it hands its
batch results to ``apply`` (through Device.on_transport), the same code the
list-form calls below use."""
from vpncrypt.protocol.events import EndpointChanged, KeepaliveSent
from vpncrypt.transport import status as S


class DataPath:
    def __init__(self, device):
        self.dev = device

    # ------------------------------------------------------------ list-form traffic

    def send(self, packets, now: float, out) -> None:
        res = self.dev.table.seal(packets, now)
        out.datagrams.extend(res.datagrams)
        waiting = [(res.peers[i], p) for i, p in enumerate(packets) if res.status[i] == S.NO_KEY]
        self.apply(res.touched, now, out, waiting)

    def receive(self, datagrams, now: float, out) -> None:
        res = self.dev.table.open(datagrams, now)
        out.packets.extend(res.packets)
        out.datagrams.extend(res.replies)
        self.apply(res.touched, now, out)

    # ------------------------------------------------------------ batch results

    def apply(self, touches, now: float, out, waiting=()) -> None:
        """What one or more batch calls did: `touches` from the table, and
        `waiting`, the (peer id, packet) pairs that found no usable key."""
        dev = self.dev
        by_pid = dev.by_pid
        for pid, pkt in waiting:
            peer = by_pid.get(pid)
            if peer is not None:
                self.stage(peer, (pkt,))
        timers = dev.timers
        for pid, flags, _messages, _nbytes in touches:
            peer = by_pid.get(pid)
            if peer is None:
                continue
            if flags & S.EV_AUTH:
                if flags & S.EV_ROAMED:
                    out.events.append(EndpointChanged(peer, peer.endpoint))
                if flags & S.EV_CONFIRMED:
                    dev.handshake_complete(peer, False, now, out)
                    self.send_staged(peer, now, out)
                if flags & S.EV_REKEY_RX and not peer.timers.last_minute_sent:
                    peer.timers.last_minute_sent = True
                    dev.handshakes.initiate(peer, now, out)
                timers.event(peer, "traversal", now)
                timers.event(peer, "authenticated_received", now)
                if flags & S.EV_DATA:
                    timers.event(peer, "data_received", now)
            if flags & S.EV_SENT:
                timers.event(peer, "traversal", now)
                timers.event(peer, "authenticated_sent", now)
                if flags & S.EV_DATA_SENT:
                    timers.event(peer, "data_sent", now)
                if flags & S.EV_REKEY_TX:
                    dev.handshakes.initiate(peer, now, out)
            if flags & S.EV_NEED_KEY:
                dev.handshakes.initiate(peer, now, out)

    # ------------------------------------------------------------ staged packets

    def stage(self, peer, packets) -> None:
        """Keep packets for after the handshake; past the limit the oldest go."""
        q = peer.staged
        q.extend(packets)
        excess = len(q) - self.dev.config.max_staged_packets
        if excess > 0:
            for _ in range(excess):
                q.popleft()
            self.dev.drop("queue_full", peer, excess)

    def send_staged(self, peer, now: float, out) -> int:
        """Seal what waits for the peer; what still finds no key waits on.
        Returns how many were sealed."""
        q = peer.staged
        if not q:
            return 0
        packets = list(q)
        q.clear()
        res = self.dev.table.seal(packets, now, peer=peer.pid)
        out.datagrams.extend(res.datagrams)
        left = [p for i, p in enumerate(packets) if res.status[i] == S.NO_KEY]
        if left:
            q.extendleft(reversed(left))
        self.apply(res.touched, now, out)
        return len(res.datagrams)

    def keepalive(self, peer, now: float, out, persistent: bool) -> None:
        """WireGuard's SendKeepalive: an empty packet if nothing else waits,
        then send what waits (which may start a handshake)."""
        empty = not peer.staged
        if empty:
            peer.staged.append(b"")
        self.send_staged(peer, now, out)
        if empty and not (peer.staged and peer.staged[-1] == b""):
            out.events.append(KeepaliveSent(peer, persistent))

    def flush_staged(self, peer, reason: str) -> None:
        n = sum(1 for p in peer.staged if p)
        peer.staged.clear()
        if n:
            self.dev.drop(reason, peer, n)
