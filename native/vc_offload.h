/* vpncrypt TUN offloads (Linux IFF_VNET_HDR): GSO super-packets read from a
 * TUN are split into MTU-sized packets, and opened packets are coalesced into
 * GRO super-packets written to it.  Part of the cffi cdef (see
 * build_native.py): plain declarations only.
 *
 * With IFF_VNET_HDR every read() from and write() to the TUN starts with a
 * 10-byte virtio_net_hdr (include/uapi/linux/virtio_net.h, host byte order):
 *   - gso_type NONE: one IP packet; with flags & NEEDS_CSUM its L4 checksum is
 *     partial: the field at csum_start+csum_offset holds the folded
 *     pseudo-header sum, the rest is to be summed from csum_start on.
 *   - gso_type TCPV4/TCPV6 (| ECN) or UDP_L4: one super-packet of up to 64 KiB
 *     to be cut into segments of gso_size payload bytes each (the last may be
 *     shorter), each with its own IP and TCP/UDP header.
 *
 * Slab conventions as in vc_io.h: packet i at slab+off[i], len[i]; nothing is
 * written outside the slab or beyond index max-1.  Malformed input is dropped
 * and counted, never read or written out of bounds.
 */
#ifndef VC_OFFLOAD_H
#define VC_OFFLOAD_H
#include <stddef.h>
#include <stdint.h>

#define VC_VNET_HDR_LEN        10
#define VC_VNET_F_NEEDS_CSUM   1
#define VC_VNET_F_DATA_VALID   2
#define VC_VNET_GSO_NONE       0
#define VC_VNET_GSO_TCPV4      1
#define VC_VNET_GSO_UDP        3     /* UFO: never enabled, dropped */
#define VC_VNET_GSO_TCPV6      4
#define VC_VNET_GSO_UDP_L4     5
#define VC_VNET_GSO_ECN        128

/* Largest IP packet one TUN read/write carries (IPv4 total length field). */
#define VC_TUN_MAX_PACKET      65535
/* vc_tun_rx.buf: room for a packet of VC_TUN_MAX_PACKET after mtu bytes of
 * headroom (mtu <= VC_TUN_MAX_MTU). */
#define VC_TUN_MAX_MTU         65535
#define VC_TUN_RX_BUF          131072
/* Packets coalesced per internal round of vc_gro_coalesce (bounded stack use). */
#define VC_GRO_ROUND           256
/* Segments per UDP super-packet written (the kernel's UDP_MAX_SEGMENTS floor). */
#define VC_GRO_UDP_MAX_SEGS    64

/* vc_tun_set_offload bits */
#define VC_TUN_OFFLOAD_CSUM    1     /* TUN_F_CSUM */
#define VC_TUN_OFFLOAD_TSO     2     /* TUN_F_TSO4 | TUN_F_TSO6 */
#define VC_TUN_OFFLOAD_ECN     4     /* TUN_F_TSO_ECN */
#define VC_TUN_OFFLOAD_USO     8     /* TUN_F_USO4 | TUN_F_USO6 (Linux 6.2+) */

/* vc_gro_coalesce / vc_tun_write_offload flags */
#define VC_GRO_TCP             1
#define VC_GRO_UDP             2     /* only when the TUN has USO on */

typedef struct {
    uint8_t  flags;
    uint8_t  gso_type;
    uint16_t hdr_len;
    uint16_t gso_size;
    uint16_t csum_start;
    uint16_t csum_offset;
} vc_vnet_hdr;

/* 1 if the TUN fd was attached with IFF_VNET_HDR, 0 if not, -errno. */
int vc_tun_has_vnet_hdr(int fd);
/* On an IFF_VNET_HDR fd: header size 10 (TUNSETVNETHDRSZ), then the largest
 * subset of `want` (VC_TUN_OFFLOAD_* bits; CSUM is implied by the others) the
 * kernel accepts with TUNSETOFFLOAD, USO and ECN dropped first.  Returns the
 * bits in effect (0: plain packets, each still behind a vnet header), or
 * -errno (-EINVAL: not an IFF_VNET_HDR fd). */
int vc_tun_set_offload(int fd, int want);

typedef struct {
    uint64_t reads;          /* read() calls that returned a packet */
    uint64_t superpackets;   /* GSO packets split */
    uint64_t segments;       /* packets cut from them */
    uint64_t csum_completed; /* NEEDS_CSUM packets whose checksum was completed */
    uint64_t dropped;        /* malformed vnet header or packet: dropped */
    uint64_t too_big;        /* packet or segment longer than mtu: dropped */
} vc_tun_rx_stats;

/* Receive state of vc_tun_read_offload, owned by the caller (zero-initialise).
 * A super-packet whose segments do not all fit in one call stays in buf and
 * is emitted first by the next call, which then reads nothing new. */
typedef struct {
    vc_tun_rx_stats st;
    vc_vnet_hdr pend_hdr;    /* the pending super-packet's header */
    uint32_t pend_len;       /* its length in buf (0: none pending) */
    uint32_t pend_seg;       /* its next segment */
    uint8_t  hdr[16];        /* the vnet header of the current read */
    uint8_t  buf[VC_TUN_RX_BUF];
} vc_tun_rx;

/* Split one packet read from a TUN (after its vnet header h; modified in
 * place: checksum fields) into packets of at most mtu bytes at slots of
 * mtu rounded up to 16 in the slab: GSO TCP/UDP super-packets into segments,
 * a NEEDS_CSUM packet checksum-completed, anything else as it is.  Starts at
 * segment *seg and stops when max packets are out or the slab is full; *seg
 * is then the next segment (0 once the packet is done).  Returns the number
 * of packets written, or -EINVAL (malformed: bad gso_type, csum_start or
 * csum_offset out of range, truncated headers, gso_size 0, IPv6 extension
 * headers in a GSO packet, ...) or -EMSGSIZE (a segment would exceed mtu);
 * nothing is written then. */
int vc_vnet_split(uint8_t *pkt, size_t pkt_len, const vc_vnet_hdr *h, size_t mtu,
                  uint8_t *slab, size_t slab_size, uint32_t *off, uint32_t *len, int max,
                  uint32_t *seg);

/* vc_tun_read_batch for an IFF_VNET_HDR fd: read() until EAGAIN, max packets
 * or a full slab, splitting super-packets (vc_vnet_split).  A packet's first
 * 2048 bytes (or mtu, if less) are read straight into its slab slot, the rest
 * into rx->buf: a packet of a 1500-byte MTU is not copied, a super-packet is
 * split from rx->buf after its first 2048 bytes are copied there, and a longer
 * single packet's tail is copied into its slot.  Returns the count, or -errno if the first read fails (-EINVAL
 * for bad arguments: mtu 0 or above VC_TUN_MAX_MTU, slab < mtu).  Malformed
 * packets are counted in rx->st and skipped. */
int vc_tun_read_offload(int fd, vc_tun_rx *rx, uint8_t *slab, size_t slab_size, size_t mtu,
                        uint32_t *off, uint32_t *len, int max);

typedef struct {
    uint64_t packets;        /* packets given */
    uint64_t writes;         /* buffers produced (super-packets and single packets) */
    uint64_t coalesced;      /* packets appended to a previous one */
    uint64_t bad_csum;       /* left alone for their checksum: a wrong one, or an
                                IPv6 UDP checksum of 0 (UDP coalescing on) */
    uint64_t write_errors;   /* write() failures (vc_tun_write_offload) */
} vc_gro_stats;

/* Coalesce n IP packets (in+off[i], len[i]) into TUN writes: each write w is
 * out+woff[w], wlen[w] bytes, a vnet header and an IP packet, and
 * wpk[w] input packets went into it.  The rules are the Linux kernel's GRO
 * (tcp_gro_receive, udp_gro_receive_segment, inet_gro_receive,
 * ipv6_gro_receive), never merging more.  With VC_GRO_TCP, consecutive
 * in-flow TCP segments (same addresses, ports, ACK, window, options, data
 * offset and reserved bits (byte 12, AccECN's AE among them), TOS/traffic
 * class, flow label, TTL/hop limit, DF; IPv4 IDs counting up by one, or with
 * DF all the first one's; contiguous sequence numbers; all payloads of one
 * size but the last, which may be shorter; PSH/FIN only on the last, CWR only
 * on the first; valid checksums; IPv4 without options, fragment bits or the
 * reserved flag bit, IPv6 without extension headers) become one GSO_TCPV4/6
 * super-packet of at most 65535 bytes with a NEEDS_CSUM header (the checksum
 * field holds the pseudo-header sum); with VC_GRO_UDP, UDP datagrams of one
 * flow likewise (GSO_UDP_L4, at most VC_GRO_UDP_MAX_SEGS; never one with
 * checksum 0).  Anything else is written as it came, behind a zero vnet
 * header, so the kernel judges it as without offloads (an IPv6 UDP datagram
 * with checksum 0 is dropped there unless the socket set UDP_NO_CHECK6_RX).
 * Order: packets of one flow (addresses, protocol, ports) keep their order,
 * and a packet whose ports cannot be read (a fragment, IPv6 extension
 * headers, ICMP) keeps its place among all packets between its addresses.
 * Returns the number of writes; *consumed gets the number of input packets
 * covered (less than n only when out or max_writes ran out: out_size >=
 * sum(len) + 10*n always suffices).  -EINVAL for bad arguments.  st may be
 * NULL. */
int vc_gro_coalesce(const uint8_t *in, const uint32_t *off, const uint32_t *len, int n,
                    uint8_t *out, size_t out_size, uint32_t *woff, uint32_t *wlen,
                    uint32_t *wpk, int max_writes, int flags, int *consumed,
                    vc_gro_stats *st);

/* Coalesce (vc_gro_coalesce, in rounds through out) and write n packets to an
 * IFF_VNET_HDR TUN fd, one write() per buffer.  Returns the number of input
 * packets handed to the kernel; *err (may be NULL) gets the first errno, with
 * vc_tun_write_batch's rules (EAGAIN/ENOBUFS/ENOMEM/EIO/EBADF stop, others
 * drop that buffer).  out_size >= 65546 + 16 (one super-packet) is required. */
int vc_tun_write_offload(int fd, const uint8_t *in, const uint32_t *off, const uint32_t *len,
                         int n, uint8_t *out, size_t out_size, int flags, vc_gro_stats *st,
                         int *err);

/* Internet checksum helpers (RFC 1071), exported for the tests: the folded
 * ones-complement sum of data, as a host-order 16-bit value, and the folded
 * sum of an IPv4/IPv6 pseudo header (addr_len 4 or 16). */
uint16_t vc_csum_fold(const uint8_t *data, size_t n, uint32_t initial);
uint16_t vc_csum_pseudo(const uint8_t *src, const uint8_t *dst, size_t addr_len, uint8_t proto,
                        uint32_t l4_len);

#endif
