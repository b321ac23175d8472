/* vpncrypt native core: the in-memory traffic source and sink that stand in for
 * a TUN device in `vpncrypt loopback-bench` (native/loopback_traffic.c; a product
 * command, so built into the module).  Packets are IPv4/UDP; each payload
 * carries a sequence number, a send timestamp and a pattern derived from both, so
 * the sink can prove every delivered byte and measure latency. */
#ifndef VC_LOOPBACK_H
#define VC_LOOPBACK_H
#include <stddef.h>
#include <stdint.h>

#define VC_TRAFFIC_MIN_PAYLOAD 24      /* seq, timestamp, stream id */
#define VC_TRAFFIC_HIST_BINS   4096    /* latency histogram: 1 us bins below 1 ms, then coarser */

typedef struct {
    uint64_t received, bytes, corrupted, duplicated, too_old;
    uint64_t max_seq;
    uint64_t hist[VC_TRAFFIC_HIST_BINS];
} vc_traffic_sink;

/* Write n packets: packet i at slab + i*stride, IPv4 src -> dst, UDP ports 9/9, payload
 * of payload_len[i] bytes (>= VC_TRAFFIC_MIN_PAYLOAD) with sequence number seq0 + i and
 * timestamp now_ns.  off[i] = base + i*stride and len[i] are set.  Returns n, or -1 if a
 * packet does not fit. */
int vc_traffic_fill(uint8_t *slab, size_t stride, uint32_t base, uint32_t *off, uint32_t *len,
                    const uint32_t *payload_len, size_t n, const uint8_t src[4],
                    const uint8_t dst[4], uint32_t stream, uint64_t seq0, uint64_t now_ns);

/* Check n delivered packets against the pattern; `seen` is a bitmap of window_bits
 * bits (a power of two) indexed by sequence number modulo its size, cleared as the
 * window moves, to count duplicates.  Latency (now_ns - timestamp) goes into hist. */
void vc_traffic_check(vc_traffic_sink *s, const uint8_t *buf, const uint32_t *off,
                      const uint32_t *len, size_t n, uint64_t now_ns, uint32_t stream,
                      uint64_t *seen, uint64_t window_bits);

/* Latency in ns at quantile q (0..1) of the histogram. */
double vc_traffic_quantile(const vc_traffic_sink *s, double q);
uint64_t vc_monotonic_ns(void);
#endif
