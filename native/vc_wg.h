/* vpncrypt native core: the WireGuard session table.
 *
 * The one owner of every session's transport state: keys, sending counters,
 * replay windows, birth times (and so expiry), the padding rule, the message
 * limits, the peers' endpoints and the AllowedIPs routing table.  The Python
 * protocol core (vpncrypt/protocol) runs handshakes and timers and drives the
 * table through a small interface: reserve an index, install a keypair,
 * zero a peer, read stats.  Rotation (current / previous / next) and key
 * confirmation happen here, once; nothing is mirrored anywhere else.
 *
 * Threads: control calls (peers, routes, endpoints, indices, install, zero,
 * config) come from one thread at a time and take the table's write lock.
 * Batch calls (seal, open) may run on several threads at once; each takes
 * the read lock for the batch.  A sending counter is taken with an atomic
 * fetch-and-add, so no two packets ever share a nonce.
 *
 * Time: every call takes the caller's monotonic `now`.  The table keeps its
 * own clock that never runs backwards: a backward jump of more than one
 * second is absorbed (time stands still until the caller's
 * clock catches up), smaller ones (threads reading the clock in a different
 * order) are ignored.  Birth times and ages are on the table's clock.
 *
 * Part of the cffi cdef (see build_native.py): plain declarations only. */
#ifndef VC_WG_H
#define VC_WG_H
#include <stddef.h>
#include <stdint.h>
#include "vc_io.h"
#include "vc_offload.h"

/* per-datagram / per-packet status */
#define VC_WG_OK              0
#define VC_WG_HANDSHAKE       1   /* a handshake message that passed the cheap checks: queued */
#define VC_WG_KEEPALIVE       2   /* authenticated and empty: nothing to deliver */
#define VC_WG_UNKNOWN_INDEX   3
#define VC_WG_MALFORMED       4
#define VC_WG_BAD_TAG         5
#define VC_WG_REPLAY          6
#define VC_WG_NOT_ALLOWED     7   /* inner source address outside the peer's AllowedIPs */
#define VC_WG_NO_ROUTE        8   /* outgoing: no peer for the destination */
#define VC_WG_NO_KEY          9   /* outgoing: no usable sending key (queue it, start a handshake) */
#define VC_WG_STALE_KEYPAIR  10   /* incoming: the receiving keypair is past REJECT_AFTER_TIME */
#define VC_WG_NO_ENDPOINT    11   /* outgoing: the peer has no endpoint */
#define VC_WG_TOO_BIG        12   /* outgoing: the sealed message would not fit its slot */
#define VC_WG_BAD_MAC1       13   /* an initiation or response whose mac1 is not for our key */
#define VC_WG_COOKIE_SENT    14   /* under load without a valid mac2: answered with a cookie reply */
#define VC_WG_RATE_LIMITED   15   /* under load, over its source address's rate */
#define VC_WG_QUEUE_FULL     16   /* counts the oldest queued handshake message, dropped for a new one */
#define VC_WG_UNKNOWN_PEER   17   /* an initiation or response while the device has no private key */
#define VC_WG_PATH_MTU       18   /* outgoing: the sealed message exceeds the peer's path MTU */
#define VC_WG_ROUTING_LOOP   19   /* outgoing: the device's own datagram to the peer's endpoint, routed back into the tunnel */
#define VC_WG_STATUS_COUNT   20

/* What a batch did to a peer (vc_wg_touch.flags), for the protocol's timers. */
#define VC_WG_EV_AUTH        0x001  /* an authenticated message arrived (data or keepalive) */
#define VC_WG_EV_DATA        0x002  /* a non-empty one arrived */
#define VC_WG_EV_CONFIRMED   0x004  /* the first message on `next` arrived: it is current now */
#define VC_WG_EV_ROAMED      0x008  /* the endpoint changed to the source of authenticated data */
#define VC_WG_EV_REKEY_RX    0x010  /* current is ours (initiator) and older than rekey_on_receive */
#define VC_WG_EV_SENT        0x020  /* something was sealed (data or keepalive) */
#define VC_WG_EV_DATA_SENT   0x040  /* a non-empty packet was sealed */
#define VC_WG_EV_REKEY_TX    0x080  /* current is past rekey_after_messages, or ours and past rekey_after_time */
#define VC_WG_EV_NEED_KEY    0x100  /* a packet found no usable sending key */

#define VC_WG_HEADER      16
#define VC_WG_OVERHEAD    32      /* header + tag */
#define VC_WG_WINDOW    8128      /* replay window: counters up to this far behind the greatest are checked */
#define VC_WG_HANDSHAKE_MAX 148   /* the largest handshake message (an initiation) */
#define VC_WG_COOKIE_REPLY   64   /* a cookie reply's length */

typedef struct vc_wg_table vc_wg_table;

typedef struct {
    double   reject_after_time;     /* 180 s: a keypair is unusable from this age */
    double   rekey_after_time;      /* 120 s: the initiator rekeys on send from this age */
    double   rekey_on_receive_age;  /* 165 s: the initiator rekeys on receive from this age */
    uint64_t reject_after_messages; /* 2^64 - 2^13 - 1: counters from this one are refused */
    uint64_t rekey_after_messages;  /* 2^60 */
    uint32_t mtu;                   /* padding never goes past it (0: no cap) */
    /* Handshake messages (a field left 0 takes WireGuard's value, given first): */
    uint32_t handshake_queue;       /* 1024: messages that wait for the protocol core at most */
    uint32_t under_load_depth;      /* 128: this many waiting put the device under load */
    uint32_t ratelimit_sources;     /* 65536: source addresses the rate limiter tracks at most */
    double   under_load_hold;       /* 1 s: under load until this long after the last deep queue */
    double   cookie_secret_age;     /* 120 s: the cookie secret is replaced at this age */
    double   ratelimit_rate;        /* 20: handshake messages per second per source address ... */
    double   ratelimit_burst;       /* 5: ... with bursts of this many (under load only) */
} vc_wg_config;

/* One entry per peer a batch touched (in the order first touched). */
typedef struct {
    uint32_t peer;
    uint32_t flags;       /* VC_WG_EV_* */
    uint32_t packets;     /* authenticated (open) or sealed (seal) messages */
    uint32_t _pad;
    uint64_t bytes;       /* their wire bytes */
} vc_wg_touch;

/* A keypair slot as seen from outside (no keys). */
typedef struct {
    int32_t  valid;           /* 0: empty slot */
    uint32_t local_index, remote_index;
    int32_t  initiator;
    double   age;             /* seconds since install, on the table's clock */
    uint64_t send_counter;    /* the next counter to send */
    uint64_t greatest_received;
    int32_t  usable;          /* current only: it would seal now */
    int32_t  _pad;
} vc_wg_keypair_info;

typedef struct {
    uint64_t rx_bytes, rx_packets, tx_bytes, tx_packets;   /* inner (delivered / sealed) packets */
    uint64_t rx_wire_bytes, tx_wire_bytes;                  /* whole transport datagrams */
    uint64_t drops[VC_WG_STATUS_COUNT];                     /* by status */
    double   last_rx, last_tx;                              /* table time of the last transport in/out */
    vc_endpoint endpoint;
    int32_t  endpoint_set;
    int32_t  _pad;
    vc_wg_keypair_info current, previous, next;
    uint32_t path_mtu;      /* the outer path MTU learned for the endpoint (0: none, or expired) */
    uint32_t inner_mtu;     /* the inner packets that fit it (vc_wg_inner_mtu; 0: none) */
} vc_wg_peer_stats;

/* ---- the table ---- */
vc_wg_table *vc_wg_table_new(const vc_wg_config *cfg);   /* NULL on a bad config or no memory */
void vc_wg_table_free(vc_wg_table *t);                     /* wipes every key */
int  vc_wg_table_configure(vc_wg_table *t, const vc_wg_config *cfg);   /* 0 or -1 (bad value) */
double vc_wg_clock(vc_wg_table *t, double now);           /* the caller's now on the table's clock */
double vc_wg_clock_offset(vc_wg_table *t);                /* table time - caller time */
/* Drops that belong to no peer (unknown index, malformed, no route), by status. */
void vc_wg_table_drops(vc_wg_table *t, uint64_t out[20]);

/* ---- peers: ids are small integers chosen by the table and reused after removal ---- */
int64_t vc_wg_peer_add(vc_wg_table *t);                   /* id, or -1 */
int  vc_wg_peer_remove(vc_wg_table *t, uint32_t peer);   /* wipes its keys; frees its indices and routes */
int  vc_wg_peer_count(vc_wg_table *t);
int  vc_wg_peer_set_endpoint(vc_wg_table *t, uint32_t peer, const vc_endpoint *ep);  /* NULL clears */
int  vc_wg_peer_get(vc_wg_table *t, uint32_t peer, vc_wg_peer_stats *out, double now);
/* After vc_udp_send_batch of a batch (its touched peers, its n endpoints): a
 * peer whose endpoint's source the kernel refused (VC_EP_SRC_REFUSED) gives
 * it up, routing picks.  Returns how many did; vc_wg_sources_forgotten
 * counts them all. */
size_t vc_wg_forget_sources(vc_wg_table *t, const vc_wg_touch *touched, size_t n_touched,
                            const vc_endpoint *ep, size_t n);
uint64_t vc_wg_sources_forgotten(vc_wg_table *t);

/* ---- path MTU (wg_pmtu.c) ----
 * Each peer keeps the path MTU learned for its current endpoint: the size
 * of the largest outer IP datagram (IP header, UDP header, WireGuard
 * message) that reaches it.  vc_wg_seal_batch refuses a message that would
 * exceed it (VC_WG_PATH_MTU); the caller answers the inner sender with
 * "fragmentation needed" / "packet too big" carrying vc_wg_inner_mtu.
 * An error from a socket's error queue is taken (vc_wg_pmtu_learn) only if
 *   - it says EMSGSIZE: ICMP type 3 code 4 (IPv4), ICMPv6 type 2 code 0, or
 *     this host's own (a datagram above the interface's MTU);
 *   - it is about a datagram sent to a peer's current endpoint (address and
 *     port), and, where the error quotes the datagram's WireGuard header, a
 *     transport data message to a receiver index of that peer's keypairs
 *     (an off-path forger must know both: outer ICMP is not authenticated);
 *   - the MTU is below what the peer has now; one below the floor (576 outer
 *     on IPv4, RFC 791 and 1122's datagram every host takes; 1280 on IPv6,
 *     RFC 8200 5) is raised to the floor, as the kernel raises one below
 *     net.ipv4.route.min_pmtu to it.
 * A learned MTU expires VC_WG_PMTU_EXPIRES after it was learned (the
 * kernel's net.ipv4.route.mtu_expires): full size is tried again, and a
 * path still narrow says so again.  A new endpoint (a roam, or one set)
 * starts without one. */
#define VC_WG_PMTU_EXPIRES       600   /* seconds */
/* While a peer has no path MTU, its first message above 1280 bytes in a
 * batch goes alone (VC_EP_ALONE), at most once every VC_WG_PMTU_CHECK
 * seconds (RFC 8899's PROBE_TIMER, 15 s): the kernel sends it with DF, so a
 * narrower path that sends ICMP says so (the kernel sends the UDP GSO
 * batches, which carry the rest, without DF: a path that fragments them
 * would otherwise never tell).  On a path that filters that ICMP, it is
 * the one datagram lost every 15 s. */
#define VC_WG_PMTU_CHECK          15
#define VC_WG_PMTU_CHECK_SIZE   1280
#define VC_WG_PMTU_FLOOR4        576
#define VC_WG_PMTU_FLOOR6       1280
#define VC_WG_PMTU_NOT_TOO_BIG   -1   /* not an EMSGSIZE error (port unreachable, ...) */
#define VC_WG_PMTU_NO_PEER       -2   /* no peer has that endpoint now */
#define VC_WG_PMTU_NOT_OURS      -3   /* the quote is no data message of that peer's */
#define VC_WG_PMTU_NOT_LOWER     -4   /* not below the peer's path MTU */
/* Returns the peer that learned the error's MTU, or a VC_WG_PMTU_* code. */
int64_t vc_wg_pmtu_learn(vc_wg_table *t, const vc_udp_error *e, double now);
/* Errors taken and refused (by vc_wg_pmtu_learn) since the table was made. */
void vc_wg_pmtu_counts(vc_wg_table *t, uint64_t *learned, uint64_t *refused);
/* The largest inner packet that fits a path MTU to an endpoint of `family`
 * (4, 6): the path MTU less the outer IP header (20, 40), UDP (8) and
 * WireGuard's header and tag (32), rounded down to WireGuard's padding (16). */
uint32_t vc_wg_inner_mtu(uint32_t path_mtu, int family);

/* ---- routing loops (wg_loop.c) ----
 * The seal refuses (VC_WG_ROUTING_LOOP, counted on the peer) a packet that
 * is the device's own datagram to the endpoint of the peer AllowedIPs picked
 * for it: UDP from the listen port to that endpoint's address and port.
 * Sealed, it would be routed back into the tunnel, again and again (the
 * route to the endpoint leads into the tunnel itself).  Only that peer's own
 * datagrams match: an endpoint reached through another peer of the device
 * (onion routing, which the Linux module allows) is sealed as any packet.
 * vc_wg_set_listen_port: the device's port (0: unknown, no check).
 * vc_wg_routing_loops: the packets refused so, every peer's, and the last
 * peer one was refused for. */
void vc_wg_set_listen_port(vc_wg_table *t, uint32_t port);
uint64_t vc_wg_routing_loops(vc_wg_table *t, int64_t *last_peer);

/* ---- indices: this side's 32-bit session ids, for handshakes and keypairs ---- */
int  vc_wg_index_reserve(vc_wg_table *t, uint32_t index, uint32_t peer);  /* 0, or -1 if in use */
int  vc_wg_index_release(vc_wg_table *t, uint32_t index);  /* a reservation only; 0 or -1 */
int64_t vc_wg_index_peer(vc_wg_table *t, uint32_t index);  /* the peer holding it, or -1 */
int  vc_wg_index_count(vc_wg_table *t);

/* ---- sessions ----
 * Install a keypair under `local_index` (reserved for the peer).  As
 * WireGuard: an initiator's keypair becomes current (previous := next if
 * there was one, else the old current; everything else is retired); a
 * responder's waits in `next` until the first message on it arrives (the key
 * confirmation, done by vc_wg_open_batch), and retires the old next and
 * previous.  Returns 0, or -1 (index not reserved for the peer). */
int  vc_wg_install(vc_wg_table *t, uint32_t peer, uint32_t local_index, uint32_t remote_index,
                   const uint8_t send_key[32], const uint8_t recv_key[32], int initiator, double now);
/* Retire every keypair and index reservation of the peer (WireGuard's zeroing). */
int  vc_wg_peer_zero(vc_wg_table *t, uint32_t peer);
/* Free keypairs that batch calls retired (confirmation rotates one out).  Cheap
 * when there are none; control calls do it too. */
void vc_wg_maintain(vc_wg_table *t);

/* ---- AllowedIPs: family 4 or 6, addr in network order, cidr 0..32 / 0..128 ---- */
int  vc_wg_route_add(vc_wg_table *t, int family, const uint8_t *addr, int cidr, uint32_t peer);
int  vc_wg_route_remove(vc_wg_table *t, int family, const uint8_t *addr, int cidr, uint32_t peer);
int  vc_wg_route_clear_peer(vc_wg_table *t, uint32_t peer);
int64_t vc_wg_route_lookup(vc_wg_table *t, int family, const uint8_t *addr);   /* peer or -1 */
/* The peer's routes, longest prefix first: up to cap entries of 18 bytes
 * (family, cidr, 16 address bytes).  Returns how many the peer has. */
int  vc_wg_route_list(vc_wg_table *t, uint32_t peer, uint8_t *out, int cap);

/* ---- batches ----
 * Seal inner IP packets (packet i at in + in_off[i], in_len[i]).  With
 * peer < 0 each packet goes to the peer its destination routes to; with
 * peer >= 0 all go to that peer (queued packets, keepalives: length 0).  The
 * j-th message sealed is written at out + j * stride, with out_len[j] and
 * out_ep[j]; at most out_cap are sealed.  status[i] and peer_of[i] (the
 * routed peer or -1) are set for every packet.  Padding: to a multiple of 16,
 * never past the MTU.  Returns the number sealed. */
size_t vc_wg_seal_batch(vc_wg_table *t, const uint8_t *in, const uint32_t *in_off,
                        const uint32_t *in_len, size_t n, int64_t peer, double now,
                        uint8_t *out, size_t stride, size_t out_cap, uint32_t *out_len,
                        vc_endpoint *out_ep, int32_t *status, int32_t *peer_of,
                        vc_wg_touch *touched, size_t touched_cap, size_t *n_touched);

/* Open received datagrams in place (datagram i at buf + off[i], len[i], from
 * ep[i]).  status[i] gets a VC_WG_* code.  Inner packets to deliver are listed
 * in deliver_off / deliver_len (their IP length: padding removed).  Every
 * other datagram gets the cheap checks of a handshake message (see below):
 * VC_WG_HANDSHAKE if it went into the handshake queue; the j-th cookie reply
 * made is written at reply + j * reply_stride (reply_stride >= 64), with
 * reply_len[j] and reply_ep[j] (room for n).  Returns the number to deliver;
 * *n_reply, *n_queued and *n_touched are set.  A datagram that fails in any
 * way is left unchanged in buf (it is never decrypted unless authentic). */
size_t vc_wg_open_batch(vc_wg_table *t, uint8_t *buf, const uint32_t *off, const uint32_t *len,
                        const vc_endpoint *ep, size_t n, double now, int32_t *status,
                        uint32_t *deliver_off, uint32_t *deliver_len,
                        uint8_t *reply, size_t reply_stride, uint32_t *reply_len,
                        vc_endpoint *reply_ep, size_t *n_reply, size_t *n_queued,
                        vc_wg_touch *touched, size_t touched_cap, size_t *n_touched);

/* ---- handshake messages ----
 * The checks that need no Noise state, as WireGuard makes them, before a
 * message may cost the protocol core a Diffie-Hellman:
 *   - the size of its type (initiation 148, response 92, cookie reply 64),
 *     else VC_WG_MALFORMED (so is an unknown type);
 *   - an initiation or response: a private key is set (VC_WG_UNKNOWN_PEER),
 *     mac1 = MAC(HASH("mac1----" || public key), message up to mac1)
 *     (VC_WG_BAD_MAC1);
 *   - under load (under_load_depth messages waiting, counting this one, or
 *     until under_load_hold after that last was so): a valid mac2, made with
 *     the cookie MAC(secret, source address || port) (the secret replaced at
 *     cookie_secret_age), else a cookie reply (XChaCha20-Poly1305 under
 *     HASH("cookie--" || public key), a random nonce, the message's mac1 as
 *     AAD) goes back (VC_WG_COOKIE_SENT); then the token bucket of the
 *     source address (ratelimit_rate per second, ratelimit_burst, a new
 *     source starts full) must have a token (VC_WG_RATE_LIMITED);
 *   - a response must name an index reserved for a handshake, a cookie
 *     reply any index this side holds (VC_WG_UNKNOWN_INDEX).
 * What passes waits in the handshake queue; when it is full the oldest
 * message in it is dropped (VC_WG_QUEUE_FULL).  The protocol core takes them
 * newest first, so the newest initiation of a peer is answered first and an
 * older one it replaced fails the timestamp check. */
/* The device's public key (NULL: no private key). */
void vc_wg_set_public_key(vc_wg_table *t, const uint8_t *public_key);
/* Seed the generator of cookie secrets and reply nonces (the table seeds
 * itself from getrandom when it is made; tests make it deterministic). */
void vc_wg_seed(vc_wg_table *t, const uint8_t seed[32]);
/* Take up to cap queued messages, newest first: message i at
 * out + i * VC_WG_HANDSHAKE_MAX, len[i] bytes, from ep[i].  Returns how many. */
size_t vc_wg_handshakes_take(vc_wg_table *t, uint8_t *out, uint32_t *len, vc_endpoint *ep,
                             size_t cap);
/* How many messages wait; *under_load (unless NULL): whether the device is
 * under load at now. */
size_t vc_wg_handshakes_waiting(vc_wg_table *t, double now, int32_t *under_load);
/* ---- the responder's Noise work for one initiation (wg_handshake.c) ----
 * Runs without the GIL; x25519 and x25519_base are the addresses of
 * libsodium's crypto_scalarmult and crypto_scalarmult_base.  state: 96 bytes
 * the caller keeps between the calls (wiped by respond and on any failure).
 * begin decrypts the initiator's static key, finish (with the peer's
 * static-static DH) its TAI64N timestamp, respond makes the response's
 * ephemeral key and encrypted empty payload and the session keys (psk: 32
 * zero bytes for none).  Each returns VC_OK, VC_WG_HS_AUTH or VC_WG_HS_DH. */
#define VC_WG_HS_AUTH        -1   /* an AEAD tag did not verify */
#define VC_WG_HS_DH          -2   /* an X25519 result was all zero */
int vc_wg_hs_begin(uintptr_t x25519, uint8_t state[96], const uint8_t s_priv[32],
                   const uint8_t s_pub[32], const uint8_t msg[116], uint8_t static_out[32]);
int vc_wg_hs_finish(uint8_t state[96], const uint8_t dh_ss[32], const uint8_t msg[116],
                    uint8_t ts_out[12]);
int vc_wg_hs_respond(uintptr_t x25519, uintptr_t x25519_base, uint8_t state[96],
                     const uint8_t e_priv[32], const uint8_t re_pub[32], const uint8_t rs_pub[32],
                     const uint8_t psk[32], uint8_t e_pub_out[32], uint8_t empty_out[16],
                     uint8_t send_key[32], uint8_t recv_key[32]);
/* ---- rounds (wg_rounds.c): one batch's I/O and table work in one call ----
 * A round binds the arrays of a UDP socket (vpncrypt.dataplane.io's
 * UdpBatchSocket), a TUN (TunBatch) and a batch of this table
 * (vpncrypt.transport.native.Batch); the caller fills vc_wg_round once and
 * keeps it (and everything it points to) alive while it calls.
 *   receive: vc_udp_recv_batch_segs -> vc_wg_open_batch -> the cookie replies
 *     sent with vc_udp_send_batch -> the inner packets written with
 *     vc_tun_write_offload (tun_rx != NULL: coalesced) or vc_tun_write_batch;
 *   send: vc_tun_read_offload (split) or vc_tun_read_batch -> seal_send;
 *   seal_send: vc_wg_seal_batch -> vc_udp_send_batch.
 * Each returns what the Python composition returns (datagrams received,
 * packets read, messages sealed), or -errno of the receive or read (nothing
 * else happened then), or VC_WG_ROUND_REFUSED (the table refused the batch:
 * more than cap messages).  io says what the sockets did; gso/gro are the
 * socket's flags for this call, and io.gso_off = 1 says the send asks to turn
 * GSO off for the socket (vc_udp_send_batch's EIO/EINVAL/EMSGSIZE with every
 * datagram sent). */
#define VC_WG_ROUND_REFUSED -4096

typedef struct {
    uint32_t received;      /* datagrams received, or packets read or given */
    uint32_t delivered;     /* inner packets the table delivered */
    uint32_t written;       /* ... and how many were written */
    uint32_t sealed;        /* messages sealed */
    uint32_t sent;          /* ... and how many were sent */
    uint32_t replies;       /* cookie replies made */
    uint32_t replies_sent;  /* ... and how many were sent */
    int32_t  send_errno;    /* the first errno of a send (0: none) */
    int32_t  write_errno;   /* the first errno of the TUN write (0: none) */
    int32_t  gso_off;       /* the send asks to turn GSO off for this socket */
    uint32_t aqm_dropped;   /* transport data messages the receive side's CoDel dropped */
    uint32_t unroutable;    /* packets of the last seal dropped for VC_WG_NO_ROUTE or
                             * VC_WG_NO_ENDPOINT: the ones the Linux module answers with an
                             * ICMP error (the caller finds them by status[]); a send round
                             * with any is not routine, so the caller sees it */
    uint32_t too_big;       /* packets of the last seal dropped for VC_WG_PATH_MTU (answered
                             * with "packet too big" by the caller): not routine either */
    uint32_t pmtu_learned;  /* errors of the socket's error queue this round took
                             * (vc_wg_pmtu_learn), read when a receive found nothing or a
                             * socket error, or a send said EMSGSIZE */
    uint32_t pmtu_refused;  /* ... and refused */
} vc_wg_round_io;

typedef struct {
    /* the UDP socket */
    int32_t      udp_fd;
    int32_t      udp_max;        /* datagrams per receive */
    vc_udp_rx   *udp_rx;
    uint8_t     *udp_slab;
    size_t       udp_slab_size, udp_mtu;
    uint32_t    *udp_off, *udp_len, *udp_segs;
    vc_endpoint *udp_ep;
    int         *udp_nbufs;
    /* the TUN (tun_fd < 0: none bound) */
    int32_t      tun_fd;
    int32_t      tun_max;        /* packets per read */
    vc_tun_rx   *tun_rx;         /* NULL: no vnet header (plain read/write) */
    uint8_t     *tun_slab;
    size_t       tun_slab_size, tun_mtu;
    uint32_t    *tun_off, *tun_len;
    uint8_t     *gro_out;        /* with tun_rx: the coalescing buffer */
    size_t       gro_size;
    int32_t      gro_flags;      /* VC_GRO_* */
    int32_t      _pad;
    vc_gro_stats *gro_stats;
    /* the batch */
    size_t       cap, stride;
    int32_t     *status, *peer_of;
    uint32_t    *deliver_off, *deliver_len;
    vc_wg_touch *touched;
    uint8_t     *tx_slab;        /* message j at tx_slab + j * stride (= tx_off[j]) */
    uint32_t    *tx_off, *tx_len;
    vc_endpoint *tx_ep;
    /* results of the last call */
    size_t       n_touched, n_queued, n_reply;
    vc_wg_round_io io;
    /* the send round's fair queue (fq_codel.c), opt-in: with fq_on = 1 the
     * first vc_wg_send_round makes it (if it cannot, fq_on goes back to 0
     * and the round seals in the TUN's order, as it does with fq_on = 0);
     * vc_wg_round_release frees it.  fq_target_ns/fq_interval_ns: CoDel's
     * (0: VC_WG_FQ_TARGET_NS, VC_WG_FQ_INTERVAL_NS), read when it is made. */
    vc_fq       *fq;
    int32_t      fq_on;
    int32_t      _pad2;
    int64_t      fq_target_ns, fq_interval_ns;
} vc_wg_round;

/* The receive round runs the socket's CoDel (vc_udp_aqm_filter) between the
 * receive and the open when asked to (vc_udp_rx.aqm = 2, or 1 once set up;
 * 0, the default, is off): it returns the datagrams left (received:
 * io.received, dropped: io.aqm_dropped), which
 * udp_off/udp_len/udp_ep/udp_segs/udp_nbufs then describe. */
int64_t vc_wg_receive_round(vc_wg_table *t, vc_wg_round *r, double now, int gro, int gso);
/* The table step alone, on the round's batch arrays (Batch.open and
 * Batch.seal): vc_wg_open_batch of n datagrams at buf (replies into tx_slab;
 * n_reply, n_queued, n_touched set) and vc_wg_seal_batch of n packets at in
 * (into tx_slab; n_touched set).  Return the number delivered or sealed, or
 * VC_WG_ROUND_REFUSED (n above cap, or the table refused the batch). */
int64_t vc_wg_round_open(vc_wg_table *t, vc_wg_round *r, uint8_t *buf, const uint32_t *off,
                         const uint32_t *len, const vc_endpoint *ep, size_t n, double now);
int64_t vc_wg_round_seal(vc_wg_table *t, vc_wg_round *r, const uint8_t *in, const uint32_t *off,
                         const uint32_t *len, size_t n, int64_t peer, double now);
/* The send round: with the fair queue (fq_on), up to VC_WG_FQ_READS reads from the
 * TUN (until it has nothing more) go into the queue, stamped with
 * CLOCK_MONOTONIC, then one batch (at most tun_max packets) comes out of it
 * into the TUN slab's slots, in the queue's order, and is sealed and sent;
 * it returns the number of packets of that batch (tun_off/tun_len and
 * status[] describe them), 0 when the TUN and the queue are empty.  So a
 * round may return packets while the TUN has none: call it until it
 * returns 0.  A read error is returned only with the queue empty. */
#define VC_WG_FQ_READS        4
#define VC_WG_FQ_FLOWS        1024
#define VC_WG_FQ_BYTE_CAP     4194304   /* 4 MiB */
#define VC_WG_FQ_PACKET_CAP   4096
#define VC_WG_FQ_QUANTUM      1514
#define VC_WG_FQ_TARGET_NS    1000000
#define VC_WG_FQ_INTERVAL_NS  10000000
int64_t vc_wg_send_round(vc_wg_table *t, vc_wg_round *r, double now, int gso);
/* The fair queue's counters (0), or -1 if the round has none. */
int vc_wg_round_fq_stats(const vc_wg_round *r, vc_fq_stats *out);
/* Free what the round made (its fair queue, with the packets still in it). */
void vc_wg_round_release(vc_wg_round *r);
int64_t vc_wg_seal_send(vc_wg_table *t, vc_wg_round *r, const uint8_t *slab, const uint32_t *off,
                        const uint32_t *len, size_t n, int64_t peer, double now, int gso);

/* Rounds looped in C while they are routine (the engine's steady path, one
 * call from Python per run of rounds).  vc_wg_receive_rounds and
 * vc_wg_send_rounds run up to max_rounds (at most VC_WG_LOOP_MAX)
 * rounds of vc_wg_receive_round / vc_wg_send_round with the same arguments,
 * and stop after the first round that
 *   - is not routine: it failed, queued handshake messages, made cookie
 *     replies, dropped packets for no route or no endpoint (io.unroutable), wrote fewer packets to the TUN than delivered, sent fewer
 *     messages than sealed, turned GSO off, had a send or write errno, or
 *     touched more than one peer, another peer than the rounds before it,
 *     or with flags outside VC_WG_EV_ROUTINE (or of the other direction);
 *   - or was not full: it took less than half of `full` (the most one round
 *     can take) and the socket or TUN state holds nothing back (udp_rx
 *     next < npend, tun_rx pend_len), i.e. the next round would be the one
 *     Python's Worker.more() does not run.
 * The last round run is in the round's arrays and io, exactly as after one
 * vc_wg_*_round call; the rounds before it (all routine, one peer) are
 * summed in loop: prefix_peer/prefix_flags (OR'ed, 0: no touch),
 * prefix_data (how many had VC_WG_EV_DATA), prefix_packets/prefix_bytes.
 * sizes[i] is what round i returned (every one but the last is > 0).
 * Returns what the last round returned (a negative code: that round failed;
 * the rounds before it stand, as in loop). */
#define VC_WG_EV_ROUTINE 0x063      /* AUTH | DATA | SENT | DATA_SENT */
#define VC_WG_LOOP_MAX   16
typedef struct {
    uint32_t rounds;          /* rounds run, the last one included */
    uint32_t prefix_peer;
    uint32_t prefix_flags;
    uint32_t prefix_data;
    uint32_t prefix_packets;
    uint32_t _pad;
    uint64_t prefix_bytes;
    int64_t  sizes[16];       /* VC_WG_LOOP_MAX */
} vc_wg_loop;
/* max_rounds: 1..VC_WG_LOOP_MAX (clamped); full: what a full round takes
 * (the socket's or TUN object's batch). */
int64_t vc_wg_receive_rounds(vc_wg_table *t, vc_wg_round *r, double now, int gro, int gso, int max_rounds,
                             int full, vc_wg_loop *loop);
int64_t vc_wg_send_rounds(vc_wg_table *t, vc_wg_round *r, double now, int gso, int max_rounds, int full,
                          vc_wg_loop *loop);

#endif
