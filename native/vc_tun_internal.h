/* Shared by the TUN batch I/O (tun_batch.c, tun_offload.c); not part of the
 * cffi cdef. */
#ifndef VC_TUN_INTERNAL_H
#define VC_TUN_INTERNAL_H
#include <errno.h>

/* What a failed TUN read() with errno e means once `count` packets are in
 * hand: 0 retry (EINTR), 1 end the batch (nothing more queued, or an error
 * after some packets: it comes back on the next call), else the -errno to
 * return. */
static inline int vc_tun_read_failed(int e, int count)
{
    if (e == EINTR)
        return 0;
    if (e == EAGAIN || e == EWOULDBLOCK || count > 0)
        return 1;
    return -e;
}

/* A write() error after which the rest of the batch cannot go now (queue
 * full, no memory, interface down, fd gone); other errors drop one buffer. */
static inline int vc_tun_write_stops(int e)
{
    return e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS || e == ENOMEM || e == EIO ||
           e == EBADF || e == EFAULT;
}

#endif
