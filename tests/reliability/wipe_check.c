/* Checks that the native session table wipes session keys: it includes the
 * table's sources to look at its own memory after keypairs are rotated out,
 * retired by a confirmation, zeroed with their peer, and after a peer is
 * removed.  Built and run by test_secrets.py with the rest of native/ linked in. */
#include <stdio.h>
#include "../../native/wg_table.c"

static int holds(const void *mem, size_t n, const uint8_t key[32])
{
    const uint8_t *p = mem;
    for (size_t i = 0; i + 32 <= n; i++)
        if (memcmp(p + i, key, 32) == 0)
            return 1;
    return 0;
}

#define CHECK(cond, what) do { if (!(cond)) { printf("FAIL %s\n", what); return 1; } } while (0)
#define KPS(t) (t)->kps, (size_t)(t)->kp_cap * sizeof *(t)->kps

static void key(uint8_t k[32], int seed)
{
    for (int i = 0; i < 32; i++)
        k[i] = (uint8_t)(seed * 37 + i * 11 + 1);
}

static int install(vc_wg_table *t, uint32_t peer, uint32_t index, const uint8_t *k, int initiator)
{
    uint8_t other[32];
    key(other, 200 + (int)index);
    return vc_wg_index_reserve(t, index, peer) || vc_wg_install(t, peer, index, 1, other, k, initiator, 0.0);
}

int main(void)
{
    vc_wg_config cfg = {180.0, 120.0, 165.0, 0xFFFFFFFFFFFFDFFFULL, 1ULL << 60, 1420, 0};
    uint8_t k[6][32];
    for (int i = 0; i < 6; i++)
        key(k[i], i);
    vc_wg_table *t = vc_wg_table_new(&cfg);
    CHECK(t != NULL, "table");
    int64_t a = vc_wg_peer_add(t), b = vc_wg_peer_add(t);
    CHECK(a == 0 && b == 1, "peers");
    CHECK(install(t, 0, 11, k[0], 1) == 0 && install(t, 0, 12, k[1], 1) == 0, "install");
    CHECK(holds(KPS(t), k[0]) && holds(KPS(t), k[1]), "keys installed");
    CHECK(install(t, 0, 13, k[2], 1) == 0, "third install");        /* 11 rotates out */
    CHECK(!holds(KPS(t), k[0]), "a keypair rotated out is still in memory");
    /* a responder's keypair, confirmed by a batch: the old previous is retired */
    CHECK(install(t, 0, 14, k[3], 0) == 0, "responder install");     /* previous (12) retired now */
    CHECK(!holds(KPS(t), k[1]), "the responder's install left the previous key");
    t->peers[0].next = t->peers[0].next;                              /* (14 waits in next) */
    wg_batch_begin(t);
    uint32_t retire = t->peers[0].prev;
    t->peers[0].prev = t->peers[0].cur;
    t->peers[0].cur = t->peers[0].next;
    t->peers[0].next = WG_NIL;
    wg_kill_keypair(t, retire);
    wg_batch_end(t);
    vc_wg_maintain(t);
    CHECK(holds(KPS(t), k[2]) && holds(KPS(t), k[3]), "live keys");
    CHECK(vc_wg_peer_zero(t, 0) == 0, "zero");
    CHECK(!holds(KPS(t), k[2]) && !holds(KPS(t), k[3]), "zeroing left keys");
    CHECK(install(t, 1, 21, k[4], 1) == 0 && install(t, 1, 22, k[5], 0) == 0, "peer b");
    CHECK(vc_wg_peer_remove(t, 1) == 0, "remove");
    CHECK(!holds(KPS(t), k[4]) && !holds(KPS(t), k[5]), "removing a peer left its keys");
    /* growth of the keypair pool moves it: the old copy is wiped too */
    for (int i = 0; i < 40; i++) {
        int64_t p = vc_wg_peer_add(t);
        CHECK(p >= 0 && install(t, (uint32_t)p, 100 + (uint32_t)i, k[i % 6], 1) == 0, "many");
    }
    vc_wg_table_free(t);
    printf("OK\n");
    return 0;
}
