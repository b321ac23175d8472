// One end of a single-stream TCP test between two gVisor netstacks (Debian's
// golang-gvisor-gvisor-dev 0.0~20221219), same roles and arguments as lwip_pair.c:
//
//	gvisor_pair server FD LOCAL_IP SECONDS | gvisor_pair client FD LOCAL_IP PEER_IP SECONDS
//
// Lab prototype for issue 32. The NIC is a channel endpoint with no link layer; one
// goroutine writes each outbound IP packet as one datagram on the inherited SOCK_SEQPACKET
// fd, another injects each received datagram.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/bufferv2"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

const mtu = 1420
const port = 5001

func cpu() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func bringUp(fd int, local string) *stack.Stack {
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
	})
	sack := tcpip.TCPSACKEnabled(os.Getenv("GV_NOSACK") == "")
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	// Reno (the default) holds 0.1% loss at 50 ms to ~8.5 Mbit/s (Mathis); Linux runs CUBIC
	cc := tcpip.CongestionControlOption("cubic")
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &cc)
	if os.Getenv("GV_RECOVERY") != "" { // 0: no RACK (dupack-based), the lab's A/B
		rec := tcpip.TCPRecovery(0)
		s.SetTransportProtocolOption(tcp.ProtocolNumber, &rec)
	}
	// 4 MiB in flight needs buffers past it: the targets ask for >= 4 MiB at 50 ms
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: 6 << 20, Max: 8 << 20}
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: 4096, Default: 6 << 20, Max: 8 << 20}
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &rcv)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &snd)
	ep := channel.New(4096, mtu, "")
	if err := s.CreateNIC(1, ep); err != nil {
		panic(err.String())
	}
	addr := tcpip.Address(net.ParseIP(local).To4())
	s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: addr.WithPrefix()}, stack.AddressProperties{})
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}})
	go func() { // outbound: stack -> link
		for {
			pkt := ep.ReadContext(context.Background())
			if pkt.IsNil() {
				return
			}
			v := pkt.ToView()
			syscall.SendmsgN(fd, v.AsSlice(), nil, nil, syscall.MSG_DONTWAIT) // a full link queue is a drop
			v.Release()
			pkt.DecRef()
		}
	}()
	go func() { // inbound: link -> stack
		buf := make([]byte, 65536)
		for {
			n, _, err := syscall.Recvfrom(fd, buf, 0)
			if err != nil || n <= 0 {
				return
			}
			proto := ipv4.ProtocolNumber
			if buf[0]>>4 == 6 {
				proto = ipv6.ProtocolNumber
			}
			pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: bufferv2.MakeWithData(append([]byte(nil), buf[:n]...))})
			ep.InjectInbound(proto, pkt)
			pkt.DecRef()
		}
	}()
	return s
}

func rssKiB() int {
	b, _ := os.ReadFile("/proc/self/status")
	var kb int
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			fmt.Sscan(strings.TrimPrefix(line, "VmRSS:"), &kb)
		}
	}
	return kb
}

// idle holds N established connections and prints the RSS they cost (GV_IDLE=N).
func idle(s *stack.Stack, n int, peer string) {
	runtime.GC()
	base := rssKiB()
	conns := make([]net.Conn, 0, n)
	if peer == "" {
		l, err := gonet.ListenTCP(s, tcpip.FullAddress{NIC: 1, Port: port}, ipv4.ProtocolNumber)
		if err != nil {
			panic(err)
		}
		for len(conns) < n {
			c, err := l.Accept()
			if err != nil {
				panic(err)
			}
			conns = append(conns, c)
		}
	} else {
		dst := tcpip.FullAddress{NIC: 1, Addr: tcpip.Address(net.ParseIP(peer).To4()), Port: port}
		for len(conns) < n {
			c, err := gonet.DialTCP(s, dst, ipv4.ProtocolNumber)
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			conns = append(conns, c)
		}
	}
	time.Sleep(time.Second)
	runtime.GC()
	fmt.Printf("gvisor %s: %d idle connections, RSS %d -> %d KiB (%.1f KiB each)\n",
		os.Args[1], n, base, rssKiB(), float64(rssKiB()-base)/float64(n))
	time.Sleep(5 * time.Second)
}

func main() {
	fd, _ := strconv.Atoi(os.Args[2])
	s := bringUp(fd, os.Args[3])
	buf := make([]byte, 65536)
	if n, _ := strconv.Atoi(os.Getenv("GV_IDLE")); n > 0 {
		peer := ""
		if os.Args[1] == "client" {
			peer = os.Args[4]
		}
		idle(s, n, peer)
		return
	}
	if os.Args[1] == "server" {
		secs, _ := strconv.ParseFloat(os.Args[4], 64)
		l, err := gonet.ListenTCP(s, tcpip.FullAddress{NIC: 1, Port: port}, ipv4.ProtocolNumber)
		if err != nil {
			panic(err)
		}
		c, err := l.Accept()
		if err != nil {
			panic(err)
		}
		n, _ := c.Read(buf)
		total := int64(n)
		t0, c0 := time.Now(), cpu()
		for time.Since(t0).Seconds() < secs {
			n, err := c.Read(buf)
			if err != nil {
				break
			}
			total += int64(n)
		}
		dt, dc := time.Since(t0).Seconds(), cpu()-c0
		fmt.Printf("gvisor server: %d bytes in %.2f s = %.1f Mbit/s; receiver CPU %.2f s = %.1f Mbit/s per CPU-second\n",
			total, dt, float64(total)*8/dt/1e6, dc, float64(total)*8/dc/1e6)
		return
	}
	secs, _ := strconv.ParseFloat(os.Args[5], 64)
	peer := tcpip.FullAddress{NIC: 1, Addr: tcpip.Address(net.ParseIP(os.Args[4]).To4()), Port: port}
	var c net.Conn
	var err error
	for i := 0; i < 50; i++ {
		if c, err = gonet.DialTCP(s, peer, ipv4.ProtocolNumber); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		panic(err)
	}
	t0 := time.Now()
	for time.Since(t0).Seconds() < secs+5 {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}
