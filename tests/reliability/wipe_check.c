/* Checks that the native transport table wipes session keys: it includes
 * wg_transport.c to look at the table's own memory after a keypair is
 * removed, a sending key cleared and a peer reset.  Built and run by
 * test_secrets.py with the rest of native/ linked in. */
#include <stdio.h>
#include "../../native/wg_transport.c"

static int holds(const void *mem, size_t n, const uint8_t key[32]) {
    const uint8_t *p = mem;
    for (size_t i = 0; i + 32 <= n; i++)
        if (memcmp(p + i, key, 32) == 0) return 1;
    return 0;
}

#define CHECK(cond, what) do { if (!(cond)) { printf("FAIL %s\n", what); return 1; } } while (0)

int main(void) {
    uint8_t k1[32], k2[32], k3[32];
    for (int i = 0; i < 32; i++) { k1[i] = (uint8_t)(0xA0 + i); k2[i] = (uint8_t)(0x30 + 3 * i); k3[i] = (uint8_t)(0x71 ^ i); }
    vc_wg_table *t = vc_wg_table_new(4, 8);
    CHECK(t != NULL, "table");
    size_t rx_bytes = (size_t)t->rx_cap * sizeof *t->rx, peer_bytes = (size_t)t->max_peers * sizeof *t->peers;
    CHECK(vc_wg_rx_add(t, 11, 1, k1, 1e9) == 0 && vc_wg_rx_add(t, 12, 2, k3, 1e9) == 0, "rx_add");
    CHECK(vc_wg_tx_set(t, 1, 99, k2, 0, 1e9) == 0, "tx_set");
    CHECK(holds(t->rx, rx_bytes, k1) && holds(t->peers, peer_bytes, k2), "keys installed");
    CHECK(vc_wg_rx_remove(t, 11) == 0, "rx_remove");
    CHECK(!holds(t->rx, rx_bytes, k1), "receiving key left in the table after rx_remove");
    CHECK(vc_wg_tx_clear(t, 1) == 0, "tx_clear");
    CHECK(!holds(t->peers, peer_bytes, k2), "sending key left in the table after tx_clear");
    CHECK(vc_wg_tx_set(t, 2, 98, k2, 0, 1e9) == 0, "tx_set 2");
    CHECK(vc_wg_peer_reset(t, 2) == 0, "peer_reset");
    CHECK(!holds(t->rx, rx_bytes, k3), "receiving key left after peer_reset");
    CHECK(!holds(t->peers, peer_bytes, k2), "sending key left after peer_reset");
    vc_wg_table_free(t);
    printf("OK\n");
    return 0;
}
