/* vpncrypt native core: the WireGuard transport-data fast path.
 *
 * The sans-I/O protocol core (vpncrypt/protocol) owns handshakes, timers and
 * session lifecycle.  It mirrors what the data plane needs into a vc_wg_table:
 * receiving keypairs by local index (with their replay windows), each peer's
 * current sending keypair and endpoint, and the AllowedIPs routing table.  One
 * call then seals or opens a whole batch of type-4 messages; Python sees only
 * per-batch summaries and the datagrams that are not transport data.
 */
#ifndef VC_WG_H
#define VC_WG_H
#include <stddef.h>
#include <stdint.h>
#include "vc_io.h"

/* per-datagram / per-packet status */
#define VC_WG_OK              0
#define VC_WG_NOT_DATA        1   /* not a type-4 message: for the protocol core */
#define VC_WG_KEEPALIVE       2   /* authenticated, empty: nothing to deliver */
#define VC_WG_UNKNOWN_INDEX   3
#define VC_WG_MALFORMED       4
#define VC_WG_BAD_TAG         5
#define VC_WG_REPLAY          6
#define VC_WG_NOT_ALLOWED     7   /* inner source address not in the peer's AllowedIPs */
#define VC_WG_NO_ROUTE        8   /* outgoing: no peer for the destination */
#define VC_WG_NO_KEY          9   /* outgoing: the peer has no usable sending keypair */
#define VC_WG_EXPIRED        10   /* the keypair reached REJECT_AFTER_MESSAGES */
#define VC_WG_NO_ENDPOINT    11   /* outgoing: the peer has no known endpoint */
#define VC_WG_STATUS_COUNT   12

#define VC_WG_HEADER      16
#define VC_WG_OVERHEAD    32      /* header + tag */
#define VC_WG_WINDOW    8192      /* replay bitmap bits; 8128 usable */

typedef struct vc_wg_table vc_wg_table;

typedef struct {
    uint64_t rx_bytes, rx_packets, tx_bytes, tx_packets;   /* inner bytes/packets */
    uint64_t rx_wire_bytes, tx_wire_bytes;                   /* whole datagrams, as wg counts */
    uint64_t drops[VC_WG_STATUS_COUNT];                      /* by status */
    double   last_rx, last_tx;                               /* `now` of the last data in/out */
    uint32_t last_rx_index;                                  /* local index of the last authenticated data */
    uint32_t tx_remote_index;
    uint64_t tx_counter;                                     /* next sending counter */
    int32_t  tx_valid;
    vc_endpoint endpoint;                                    /* follows authenticated data (roaming) */
    int32_t  endpoint_set;
} vc_wg_peer_stats;

vc_wg_table *vc_wg_table_new(uint32_t max_peers, uint32_t max_keypairs);
void vc_wg_table_free(vc_wg_table *t);                       /* wipes every key */

/* Peers are small integers in [0, max_peers), chosen by the caller. */
int  vc_wg_peer_reset(vc_wg_table *t, uint32_t peer);        /* forget keys, routes and stats */
int  vc_wg_peer_set_endpoint(vc_wg_table *t, uint32_t peer, const vc_endpoint *ep);
int  vc_wg_peer_get(vc_wg_table *t, uint32_t peer, vc_wg_peer_stats *out);
/* Drops that belong to no peer (unknown index, malformed, no route), by status. */
void vc_wg_table_drops(vc_wg_table *t, uint64_t out[12]);
/* Take back n drops of `status` (a datagram retried after a handshake in its batch). */
void vc_wg_table_undrop(vc_wg_table *t, int status, uint64_t n);
/* The peer's sending keypair; it is not used at or after `expires` (a `now`). */
int  vc_wg_tx_set(vc_wg_table *t, uint32_t peer, uint32_t remote_index, const uint8_t key[32],
                  uint64_t counter, double expires);
int  vc_wg_tx_clear(vc_wg_table *t, uint32_t peer);
uint64_t vc_wg_tx_counter(vc_wg_table *t, uint32_t peer);     /* next sending counter */
int  vc_wg_tx_set_counter(vc_wg_table *t, uint32_t peer, uint64_t counter);
/* Receiving keypairs by this side's index; the window starts empty.  Data on it
 * at or after `expires` is dropped as VC_WG_EXPIRED. */
int  vc_wg_rx_add(vc_wg_table *t, uint32_t local_index, uint32_t peer, const uint8_t key[32],
                  double expires);
int  vc_wg_rx_count(vc_wg_table *t);
int  vc_wg_rx_remove(vc_wg_table *t, uint32_t local_index);

/* AllowedIPs: family 4 or 6, addr in network order, cidr 0..32 / 0..128. */
int  vc_wg_route_add(vc_wg_table *t, int family, const uint8_t *addr, int cidr, uint32_t peer);
int  vc_wg_route_remove_peer(vc_wg_table *t, uint32_t peer);
int  vc_wg_route_clear(vc_wg_table *t);
int  vc_wg_route_lookup(vc_wg_table *t, int family, const uint8_t *addr);  /* peer or -1 */

/* Open a batch of received datagrams in place (datagram i at buf+off[i], len[i], from ep[i]).
 * status[i] gets a VC_WG_* code.  Packets to deliver are listed in deliver_off/deliver_len
 * (their IP length, padding removed); datagrams that are not transport data are listed
 * in other[].  Peers that got authenticated data are listed once each in touched[].
 * Returns the number delivered; *n_other and *n_touched are set.  `now` is stored as last_rx. */
size_t vc_wg_open_batch(vc_wg_table *t, uint8_t *buf, const uint32_t *off, const uint32_t *len,
                        const vc_endpoint *ep, size_t n, double now, int32_t *status,
                        uint32_t *deliver_off, uint32_t *deliver_len,
                        uint32_t *other, size_t *n_other, uint32_t *touched, size_t *n_touched);

/* Route and seal a batch of inner IP packets (packet i at in+in_off[i], in_len[i]).  The
 * sealed messages are packed to the front: the j-th one sealed is written at out + j*stride
 * (stride >= mtu + 32), with out_len[j] and out_ep[j] (the peer's endpoint) set.  status[i]: VC_WG_OK, NO_ROUTE, NO_KEY (caller queues and
 * starts a handshake), MALFORMED, NO_ENDPOINT; peer[i] is the routed peer or -1.  Plaintext
 * is padded to a multiple of 16 but not past mtu.  Peers that sent are listed once each in
 * touched[].  Returns the number sealed. */
size_t vc_wg_seal_batch(vc_wg_table *t, const uint8_t *in, const uint32_t *in_off,
                        const uint32_t *in_len, size_t n, uint32_t mtu, double now,
                        uint8_t *out, size_t stride, uint32_t *out_len, vc_endpoint *out_ep,
                        int32_t *status, int32_t *peer, uint32_t *touched, size_t *n_touched);

/* Seal one packet (a keepalive is len 0) for a given peer, whatever its route. */
int vc_wg_seal_for_peer(vc_wg_table *t, uint32_t peer, const uint8_t *in, size_t len,
                        uint32_t mtu, double now, uint8_t *out, uint32_t *out_len);
#endif
