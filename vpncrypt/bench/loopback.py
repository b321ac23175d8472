"""vpncrypt loopback-bench: how fast is vpncrypt on this machine, and is it right?

Two real vpncrypt devices, each in its own process with its own event loop,
generate keys, do a real WireGuard handshake over UDP on 127.0.0.1, then carry
a stream of IP packets through the production data plane: the same sockets,
batching (recvmmsg/sendmmsg, GSO/GRO), batch sealing and opening, replay
window and AllowedIPs routing.  Only the inner side differs: an in-memory
source and sink of IP packets stands in for the TUN device, so no root is
needed.  Every payload carries a sequence number, a send timestamp and a
pattern, so the sink proves each delivered byte and measures latency.

The same run also measures a baseline: the same two processes forwarding the
same packets over the same batched sockets without encryption (the I/O
ceiling), and reports what fraction of it the encrypted path reaches.

Exit status: 0 if the handshake completed and nothing delivered was corrupted
or duplicated; 1 otherwise.
"""
import argparse
import asyncio
import json
import os
import queue
import random
import socket
import subprocess
import sys
import threading
import time

from vpncrypt.bench.machine import cpu_model
from vpncrypt.dataplane.sockopts import force_buffers, socket_drops
from vpncrypt.selfcmd import python_command

IMIX = [(40, 7), (576, 4), (1500, 1)]      # (IP packet size, weight): the classic simple IMIX
HEADER = 28                                  # IPv4 + UDP


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", type=int, default=1472,
                   help="UDP payload bytes of each inner packet (default 1472: a full 1500-byte IP packet)")
    p.add_argument("--mix", choices=["fixed", "imix", "random"], default="fixed",
                   help="packet sizes: fixed (--size), imix (7:4:1 of 52/576/1500-byte packets), "
                        "or random payloads from [64, 1088)")
    p.add_argument("--bidirectional", action="store_true", help="traffic both ways at once")
    p.add_argument("--peers", type=int, default=1, help="peers (devices on the receiving side)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--duration", type=float, default=None, help="seconds of traffic per row (default 10)")
    g.add_argument("--packets", type=int, default=None, help="packets to send per direction, per row")
    p.add_argument("--rate", type=float, default=0.0,
                   help="pace the source at this many packets/s per direction (default: as fast as it goes)")
    p.add_argument("--crypto", choices=["native", "pynacl", "both"], default="native",
                   help="native: the batch fast path; pynacl: each packet sealed through pynacl, "
                        "as a naive daemon would; both: a row for each, in one run")
    p.add_argument("--batch", type=int, default=64, help="packets per batch (default 64)")
    p.add_argument("--threads", default="1", metavar="N[,N]",
                   help="the engine's data-plane threads (1 or 2; a list runs the native row "
                        "once per value, to show the scaling; default 1)")
    p.add_argument("--no-baseline", action="store_true", help="skip the unencrypted baseline row")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--progress", choices=["auto", "on", "off"], default="auto",
                   help="live progress line on stderr (auto: when stderr is a terminal)")


# ======================================================================= parent

def _payload_sizes(args, n=4096, seed=1):
    rng = random.Random(seed)
    if args.mix == "fixed":
        return [args.size]
    if args.mix == "imix":
        # the 40-byte packets grow to 52: the smallest that holds seq, time and stream
        table = [max(size - HEADER, 24) for size, w in IMIX for _ in range(w)]
        rng.shuffle(table)
        return table
    return [rng.randrange(64, 1088) for _ in range(n)]


def _inner_addr(i: int) -> str:
    return f"10.1.{i >> 8}.{i & 255}" if i else "10.0.0.1"


def pair_configs(args, mode, crypto):
    """Worker configs: A holds one device with N peers; B holds N devices."""
    from vpncrypt.protocol import keys
    a_key = keys.genkey()
    b_keys = [keys.genkey() for _ in range(args.peers)]
    sizes = _payload_sizes(args)
    total = args.packets
    duration = args.duration if args.duration is not None else (None if total else 10.0)
    common = dict(mode=mode, crypto=crypto, batch=args.batch, sizes=sizes,
                  threads=getattr(args, "threads_now", 1),
                  duration=duration, packets=total, rate=args.rate,
                  timers=getattr(args, "timers", None))
    a = dict(common, name="A", send=True, devices=[dict(
        private_key=a_key, address=_inner_addr(0),
        peers=[dict(public_key=keys.pubkey(k), allowed_ips=[_inner_addr(i + 1) + "/32"])
               for i, k in enumerate(b_keys)])])
    b = dict(common, name="B", send=args.bidirectional, devices=[dict(
        private_key=k, address=_inner_addr(i + 1),
        peers=[dict(public_key=keys.pubkey(a_key), allowed_ips=[_inner_addr(0) + "/32"])])
        for i, k in enumerate(b_keys)])
    return a, b


class Worker:
    """One worker process; its JSON lines arrive through a reader thread into
    a queue shared by the workers of a run (so waiting on several is simple)."""

    def __init__(self, cfg, inbox=None):
        self.cfg = cfg
        self.inbox = inbox if inbox is not None else queue.Queue()
        self.mine = queue.Queue()
        # the installed vpncrypt, whatever the working directory is
        self.proc = subprocess.Popen(python_command("from vpncrypt.bench.loopback import _worker; "
                                                    "_worker()"),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     bufsize=1)
        threading.Thread(target=self._read, daemon=True).start()
        self.send(cfg)

    def _read(self):
        for line in self.proc.stdout:
            msg = json.loads(line)
            self.mine.put(msg)
            self.inbox.put((self, msg))
        self.mine.put(None)
        self.inbox.put((self, None))

    def send(self, obj):
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def recv(self, timeout=120.0):
        """The next message from this worker (progress messages skipped)."""
        while True:
            try:
                msg = self.mine.get(timeout=timeout)
            except queue.Empty:
                raise RuntimeError(f"worker {self.cfg['name']} stopped reporting") from None
            if msg is None:
                raise RuntimeError(f"worker {self.cfg['name']} exited ({self.proc.wait()})")
            if "progress" not in msg and "sent_done" not in msg:
                return msg

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _progress(enabled, text):
    if enabled:
        sys.stderr.write("\r\033[K" + text)
        sys.stderr.flush()


def _run_row(args, mode, show_progress, crypto="none"):
    row, _, _ = run_pair(args, mode, crypto, show_progress=show_progress)
    return row


def run_pair(args, mode, crypto, *, path=None, show_progress=False, drain=0.3):
    """Run the two worker processes once; returns (summary row, raw A, raw B).
    `path(a_ports, b_ports) -> (ports A sends to, ports B sends to)` puts
    something between them (the reliability tests' hostile relay)."""
    a_cfg, b_cfg = pair_configs(args, mode, crypto)
    inbox = queue.Queue()
    a, b = Worker(a_cfg, inbox), Worker(b_cfg, inbox)
    try:
        pa, pb = a.recv()["ports"], b.recv()["ports"]
        to_b, to_a = path(pa, pb) if path else (pb, pa)
        a.send({"peer_ports": to_b})
        b.send({"peer_ports": to_a})
        ready = [a.recv(), b.recv()]
        if not all(r.get("ready") for r in ready):
            row = {"mode": mode, "handshake": False, "error": [r.get("error") for r in ready]}
            return row, None, None
        a.send({"go": True})
        b.send({"go": True})
        senders = [w for w in (a, b) if w.cfg["send"]]
        done = 0
        while done < len(senders):
            try:
                w, msg = inbox.get(timeout=120)
            except queue.Empty:
                raise RuntimeError("the workers stopped reporting") from None
            if msg is None:
                raise RuntimeError(f"worker {w.cfg['name']} exited ({w.proc.wait()})")
            if "progress" in msg:
                p = msg["progress"]
                _progress(show_progress, f"{mode}: {p['sent']:,} packets sent, {p['elapsed']:.1f} s")
            elif "sent_done" in msg:
                done += 1
        time.sleep(drain)                    # let the last batches land
        a.send({"stop": True})
        b.send({"stop": True})
        ra, rb = a.recv(), b.recv()
        _progress(show_progress, "")
        return _summarise(mode, crypto, ra, rb), ra, rb
    finally:
        a.close()
        b.close()


def _kernels(rows):
    """The kernels this machine selects, and those that served the native rows'
    data paths in the workers (as they reported them)."""
    from vpncrypt import crypto
    served = sorted({tuple(k) for r in rows for k in (r.get("kernels_served") or {}).values() if k})
    return {"chacha": crypto.active_implementation(),
            "poly1305": crypto.active_poly1305_implementation(),
            "served": [list(k) for k in served]}


def _summarise(mode, crypto, ra, rb):
    sinks = [ra["sink"], rb["sink"]]
    sent = ra["sent"] + rb["sent"]
    received = sum(s["received"] for s in sinks)
    payload = sum(s["bytes"] for s in sinks)
    # the receive window of each sink: first to last packet
    spans = [s["last"] - s["first"] for s in sinks if s["received"] > 1]
    elapsed = max(spans) if spans else 0.0
    lat = [s for s in sinks if s["received"]]
    row = {
        "mode": mode,
        "crypto": crypto,
        "handshake": True,
        "sent": sent,
        "delivered": received,
        "delivered_pct": 100.0 * received / sent if sent else 0.0,
        "elapsed_s": elapsed,
        "pps": received / elapsed if elapsed else 0.0,
        "gbit_s": payload * 8 / elapsed / 1e9 if elapsed else 0.0,
        "latency_p50_us": max(s["p50_ns"] for s in lat) / 1e3 if lat else None,
        "latency_p99_us": max(s["p99_ns"] for s in lat) / 1e3 if lat else None,
        "corrupted": sum(s["corrupted"] for s in sinks),
        "duplicated": sum(s["duplicated"] for s in sinks),
        "cpu_s_per_packet": {
            "A": ra["cpu_s"] / max(1, ra["sent"] + ra["sink"]["received"]),
            "B": rb["cpu_s"] / max(1, rb["sent"] + rb["sink"]["received"]),
        },
        "cpu_s": {"A": ra["cpu_s"], "B": rb["cpu_s"]},
        "drops": {"A": ra["drops"], "B": rb["drops"]},
        "rss_kb": {"A": ra["rss_kb"], "B": rb["rss_kb"]},
        "rss_growth": {"A": ra["rss_growth"], "B": rb["rss_growth"]},
        "kernels_served": {"A": ra.get("kernels"), "B": rb.get("kernels")},
    }
    row["intact"] = row["corrupted"] == 0 and row["duplicated"] == 0
    return row


def run(args) -> int:
    if args.peers < 1 or args.peers > 1000:
        print("vpncrypt loopback-bench: --peers must be from 1 to 1000", file=sys.stderr)
        return 2
    if args.mix == "fixed" and not 24 <= args.size <= 65000:
        print("vpncrypt loopback-bench: --size must be from 24 to 65000", file=sys.stderr)
        return 2
    try:
        thread_counts = [int(t) for t in str(args.threads).split(",") if t]
    except ValueError:
        thread_counts = []
    if not thread_counts or any(t not in (1, 2) for t in thread_counts):
        print("vpncrypt loopback-bench: --threads takes 1, 2 or 1,2", file=sys.stderr)
        return 2
    show = args.progress == "on" or (args.progress == "auto" and sys.stderr.isatty())
    rows = []
    if not args.no_baseline:
        rows.append(_run_row(args, "baseline", show))
    cryptos = ["native", "pynacl"] if args.crypto == "both" else [args.crypto]
    for crypto in cryptos:
        for n in (thread_counts if crypto == "native" else [1]):
            args.threads_now = n
            row = _run_row(args, "wireguard", show, crypto)
            row["threads"] = n
            rows.append(row)
    wg = next(r for r in rows if r["mode"] == "wireguard")
    base = rows[0] if not args.no_baseline else None
    by = {r["crypto"]: r for r in rows}
    result = {
        "command": "vpncrypt loopback-bench " + " ".join(sys.argv[2:]) if len(sys.argv) > 1 else "",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpu": cpu_model(),
        "settings": {"size": args.size, "mix": args.mix, "bidirectional": args.bidirectional,
                     "peers": args.peers, "crypto": args.crypto, "batch": args.batch,
                     "duration": args.duration, "packets": args.packets, "rate": args.rate,
                     "threads": thread_counts},
        "rows": rows,
        "kernels": _kernels(rows),
        "fraction_of_baseline": (wg.get("pps", 0) / base["pps"]) if base and base.get("pps") else None,
        "native_over_pynacl": (by["native"]["pps"] / by["pynacl"]["pps"])
                              if {"native", "pynacl"} <= by.keys() and by["pynacl"].get("pps") else None,
        "ok": all(r.get("handshake") for r in rows) and all(r.get("intact", False) for r in rows)
              and all(r.get("delivered", 0) > 0 for r in rows),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_table(result)
    return 0 if result["ok"] else 1


def _print_table(result):
    s = result["settings"]
    print(f"vpncrypt loopback-bench: {s['mix']} payload {s['size']} B, "
          f"{'both directions' if s['bidirectional'] else 'one direction'}, {s['peers']} peer(s), "
          f"crypto {s['crypto']}, on {result['cpu']}")
    head = f"{'row':<22}{'packets/s':>12}{'Gbit/s':>9}{'delivered':>11}{'p50 us':>9}{'p99 us':>9}" \
           f"{'cpu us/pkt A':>14}{'B':>7}{'intact':>8}"
    print(head)
    print("-" * len(head))
    for r in result["rows"]:
        if not r.get("handshake"):
            print(f"{r['mode']:<22}handshake FAILED: {r.get('error')}")
            continue
        name = "baseline (no crypto)" if r["mode"] == "baseline" else f"wireguard ({r['crypto']})"
        if r.get("threads", 1) > 1:
            name = f"wireguard (native, {r['threads']}t)"
        cpu = r["cpu_s_per_packet"]
        print(f"{name:<22}{r['pps']:>12,.0f}{r['gbit_s']:>9.2f}{r['delivered_pct']:>10.1f}%"
              f"{r['latency_p50_us'] or 0:>9.0f}{r['latency_p99_us'] or 0:>9.0f}"
              f"{cpu['A'] * 1e6:>14.2f}{cpu['B'] * 1e6:>7.2f}{'yes' if r['intact'] else 'NO':>8}")
    if result["fraction_of_baseline"] is not None:
        print(f"encrypted path reaches {100 * result['fraction_of_baseline']:.0f}% of the "
              f"unencrypted baseline (packets/s)")
    if result["native_over_pynacl"] is not None:
        print(f"native fast path: {result['native_over_pynacl']:.1f}x the packets/s of sealing each "
              f"packet through pynacl")
    print("result: " + ("OK, every delivered payload matched byte for byte" if result["ok"]
                        else "FAILED (see the rows above)"))


# ======================================================================= worker

class _Source:
    """Fills batches of IPv4/UDP packets natively (vc_traffic_fill)."""

    def __init__(self, sizes, batch, src, dsts, stream):
        from vpncrypt._native import ffi
        self.ffi = ffi
        self.batch = batch
        self.stride = 2048 if max(sizes) + HEADER <= 2048 else (max(sizes) + HEADER + 63) & ~63
        self.slab = ffi.new("uint8_t[]", batch * self.stride)
        self.view = memoryview(ffi.buffer(self.slab))
        self.off = ffi.new("uint32_t[]", batch)
        self.len = ffi.new("uint32_t[]", batch)
        # a ring of payload sizes, long enough to take any batch from any start
        ring = list(sizes) * (1 + (2 * batch) // len(sizes))
        self.ring = ffi.new("uint32_t[]", ring + ring[:batch])
        self.ring_n = len(ring)
        self.src = ffi.new("uint8_t[4]", socket.inet_aton(src))
        self.dsts = [ffi.new("uint8_t[4]", socket.inet_aton(d)) for d in dsts]
        self.stream = stream
        self.seq = 0

    def fill(self, n, now_ns):
        from vpncrypt._native import lib
        per = max(1, n // len(self.dsts))
        done = 0
        for j, dst in enumerate(self.dsts):
            k = n - done if j == len(self.dsts) - 1 else min(per, n - done)
            if k <= 0:
                break
            start = (self.seq + done) % self.ring_n
            if lib.vc_traffic_fill(self.slab + done * self.stride, self.stride, done * self.stride,
                                   self.off + done, self.len + done, self.ring + start, k, self.src,
                                   dst, self.stream, self.seq + done, now_ns) < 0:
                raise ValueError("a packet does not fit the source stride")
            done += k
        self.seq += n
        return n


class _Sink:
    """Checks delivered packets natively (vc_traffic_check); the `inner` side of the engine."""

    fd = None

    def __init__(self, streams):
        from vpncrypt._native import ffi, lib
        self.ffi, self.lib = ffi, lib
        self.state = {s: ffi.new("vc_traffic_sink *") for s in streams}
        self.window = 1 << 20
        self.seen = {s: ffi.new("uint64_t[]", self.window // 64) for s in streams}
        self.first = self.last = None
        self.armed = False        # packets before the timed run (the handshake probe) are not counted

    def write(self, buf, off, lens, n):
        if not self.armed:
            return n, 0
        now = self.lib.vc_monotonic_ns()
        if self.first is None:
            self.first = now
        self.last = now
        for s, st in self.state.items():
            self.lib.vc_traffic_check(st, buf, off, lens, n, now, s, self.seen[s], self.window)
            break
        return n, 0

    def write_packets(self, packets):
        if not packets:
            return
        ffi = self.ffi
        data = b"".join(packets)
        offs, pos = [], 0
        for p in packets:
            offs.append(pos)
            pos += len(p)
        self.write(ffi.from_buffer(data), ffi.new("uint32_t[]", offs),
                   ffi.new("uint32_t[]", [len(p) for p in packets]), len(packets))

    def report(self):
        st = next(iter(self.state.values()))
        lib = self.lib
        return {"received": st.received, "bytes": st.bytes, "corrupted": st.corrupted,
                "duplicated": st.duplicated, "too_old": st.too_old,
                "p50_ns": lib.vc_traffic_quantile(st, 0.5), "p99_ns": lib.vc_traffic_quantile(st, 0.99),
                "first": (self.first or 0) / 1e9, "last": (self.last or 0) / 1e9}


def _growth(samples):
    """Resident size at the last tenth of the run over the second tenth (1.0 = flat)."""
    if len(samples) < 10:
        return None
    tenth = len(samples) // 10
    second = sorted(samples[tenth:2 * tenth])[tenth // 2]
    last = sorted(samples[-tenth:])[tenth // 2]
    return last / second if second else None


def _after_warmup(samples):
    """The median of the second tenth of the samples (the first tenth is warm-up)."""
    if len(samples) < 10:
        return samples[-1] if samples else None
    tenth = len(samples) // 10
    return sorted(samples[tenth:2 * tenth])[tenth // 2]


def _rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def _worker_main(cfg, inp, outp):
    from vpncrypt.dataplane.engine import Engine
    from vpncrypt.dataplane.io import UdpBatchSocket
    from vpncrypt.protocol import keys
    from vpncrypt.protocol.device import Device
    from vpncrypt.protocol.timers import TimerConfig

    loop = asyncio.get_running_loop()
    lines = asyncio.Queue()
    loop.add_reader(inp.fileno(), lambda: lines.put_nowait(inp.readline()))

    async def read():
        line = await lines.get()
        if not line:
            raise SystemExit(0)
        return json.loads(line)

    def write(obj):
        outp.write(json.dumps(obj) + "\n")
        outp.flush()

    wireguard = cfg["mode"] == "wireguard"
    stream = 1 if cfg["name"] == "A" else 2
    sink = _Sink([2 if stream == 1 else 1])
    socks, engines, devices = [], [], []
    for dcfg in cfg["devices"]:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        force_buffers(s, 16 << 20)
        s.bind(("127.0.0.1", 0))
        socks.append(UdpBatchSocket(s, batch=cfg["batch"], mtu=2048))
    write({"ports": [s.sock.getsockname()[1] for s in socks]})
    peer_ports = (await read())["peer_ports"]

    src = cfg["devices"][0]["address"]
    if wireguard:
        backend = "pynacl" if cfg["crypto"] == "pynacl" else "native"
        for i, (dcfg, udp) in enumerate(zip(cfg["devices"], socks)):
            timers = TimerConfig(**cfg["timers"]) if cfg.get("timers") else None
            dev = Device(keys.decode(dcfg["private_key"]), backend=backend, timer_config=timers,
                         mtu=max(cfg["sizes"]) + HEADER)
            for j, pcfg in enumerate(dcfg["peers"]):
                port = peer_ports[j] if len(dcfg["peers"]) > 1 else peer_ports[0]
                dev.add_peer(keys.decode(pcfg["public_key"]), allowed_ips=pcfg["allowed_ips"],
                             endpoint=("127.0.0.1", port))
            eng = Engine(dev, udp, sink, loop=loop, max_packet=max(cfg["sizes"]) + HEADER,
                         threads=cfg.get("threads", 1))
            eng.start()
            devices.append(dev)
            engines.append(eng)
    else:
        from vpncrypt.dataplane.io import endpoint_from_addr
        eps = [endpoint_from_addr(("127.0.0.1", p)) for p in peer_ports]

        def on_plain(udp):
            while True:
                n, view, off, lens, ep = udp.recv()
                if n == 0:
                    return
                sink.write(udp.slab, off, lens, n)
        for udp in socks:
            loop.add_reader(udp.fd, on_plain, udp)

    dsts = [p["allowed_ips"][0].split("/")[0] for p in cfg["devices"][0]["peers"]]
    source = _Source(cfg["sizes"], cfg["batch"], src, dsts, stream) if cfg["send"] else None

    # The handshake: one packet to each peer, then wait for the sessions.
    ready, error = True, None
    if wireguard:
        if cfg["name"] == "A":       # one side starts, so the handshakes never cross
            from vpncrypt._native import lib
            probe = _Source([64], len(dsts), src, dsts, 99)
            probe.fill(len(dsts), lib.vc_monotonic_ns())
            engines[0].send_inner(probe.slab, probe.view, probe.off, probe.len, len(dsts))
        # a lost first initiation is sent again after REKEY_TIMEOUT (5 s), and
        # a machine under load may need more than one more: room for several
        deadline = loop.time() + 30
        while loop.time() < deadline:
            if all(d.has_session(p) for d in devices for p in d.peers.values()):
                break
            await asyncio.sleep(0.01)
        else:
            ready, error = False, "handshake did not complete within 30 s"
    write({"ready": ready, "error": error})
    await read()                                     # go
    sink.armed = True

    cpu0 = time.process_time()
    sent = 0
    stop = asyncio.Event()

    async def control():
        while True:
            msg = await read()
            if msg.get("stop"):
                stop.set()
                return

    ctl = asyncio.create_task(control())
    rss_samples, fd_samples, task_samples = [], [], []

    async def sample_rss():
        while True:
            rss_samples.append(_rss_kb())
            fd_samples.append(len(os.listdir("/proc/self/fd")))
            task_samples.append(len(asyncio.all_tasks()))
            await asyncio.sleep(0.25)

    sampler = asyncio.create_task(sample_rss())
    if source is not None:
        from vpncrypt._native import lib
        batch = cfg["batch"]
        limit = cfg["packets"]
        t0 = loop.time()
        end = t0 + cfg["duration"] if cfg["duration"] else None
        next_report = t0 + 0.5
        rate = cfg["rate"]
        if rate:   # paced: batches of about 200 us of traffic, so pacing adds no bursts
            batch = max(1, min(batch, int(rate * 0.0002)))
        udp0 = socks[0]
        plain_ep = None
        if not wireguard:
            from vpncrypt._native import ffi
            plain_ep = ffi.new("vc_endpoint[]", batch)
            for i in range(batch):
                plain_ep[i] = eps[i % len(eps)][0]
        rounds = 0
        while not stop.is_set():
            now = loop.time()
            if (end is not None and now >= end) or (limit is not None and sent >= limit):
                break
            n = batch if limit is None else min(batch, limit - sent)
            if rate:
                ahead = sent / rate - (now - t0)
                if ahead > 0.002:
                    await asyncio.sleep(ahead)        # the loop's timers are coarse (1 ms)
                elif ahead > 0:
                    time.sleep(ahead)                 # fine pacing: nothing else waits on this loop
            source.fill(n, lib.vc_monotonic_ns())
            if wireguard:
                engines[0].send_inner(source.slab, source.view, source.off, source.len, n)
            else:
                udp0.send(source.slab, source.off, source.len, plain_ep, n)
            sent += n
            rounds += 1
            if rounds % 4 == 0:
                await asyncio.sleep(0)
            if now >= next_report:
                write({"progress": {"sent": sent, "elapsed": now - t0}})
                next_report = now + 0.5
        write({"sent_done": sent})
    await stop.wait()
    ctl.cancel()
    sampler.cancel()
    cpu = time.process_time() - cpu0
    drops = {}
    for eng in engines:
        for k, v in eng.device.drops().items():
            drops[k] = drops.get(k, 0) + v
        for k, v in eng.counters.as_dict().items():
            if k.endswith("dropped") and v:
                drops[k] = drops.get(k, 0) + v
        eng.stop()
    rx_overflow = sum(socket_drops(s.sock) for s in socks)
    if rx_overflow:
        drops["socket_receive_buffer"] = rx_overflow
    handshakes = sum(p.counters.handshakes_completed for d in devices for p in d.peers.values())
    kernels = None
    if wireguard and cfg["crypto"] == "native":
        from vpncrypt.crypto import last_kernels
        kernels = list(last_kernels())          # this thread's last seal or open (threads=1)
        for eng in engines:
            kernels = list(getattr(eng, "last_kernels", None) or kernels)
    write({"sent": sent, "sink": sink.report(), "cpu_s": cpu, "drops": drops, "rss_kb": _rss_kb(),
           "handshakes": handshakes, "kernels": kernels,
           "rss_growth": _growth(rss_samples), "rss_after_warmup_kb": _after_warmup(rss_samples),
           "fds": {"after_warmup": _after_warmup(fd_samples), "max": max(fd_samples, default=None),
                   "last": fd_samples[-1] if fd_samples else None},
           "tasks": {"after_warmup": _after_warmup(task_samples),
                     "max": max(task_samples, default=None),
                     "last": task_samples[-1] if task_samples else None}})


def _worker():
    cfg = json.loads(sys.stdin.readline())
    if os.environ.get("VPNCRYPT_BENCH_STALL_DUMP"):      # debugging: where a stuck worker is
        import faulthandler
        faulthandler.dump_traceback_later(float(os.environ["VPNCRYPT_BENCH_STALL_DUMP"]), repeat=True)
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(_worker_main(cfg, sys.stdin, sys.stdout))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        _worker()
    else:
        ap = argparse.ArgumentParser(prog="vpncrypt loopback-bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
        add_arguments(ap)
        raise SystemExit(run(ap.parse_args()))
