/* One end of a single-stream TCP test between two lwIP stacks (Debian's liblwip, as shipped).
 *
 * Lab prototype for issue 32: the stack runs in its own thread (NO_SYS=0, as packaged); its
 * netif has no link layer and sends each IP packet as one datagram on an inherited
 * AF_UNIX SOCK_SEQPACKET fd; a reader thread hands received datagrams to tcpip_input.
 * The server reports bytes received in SECONDS after the first byte and the CPU time of the
 * whole process (all threads) over that window.
 *
 *   lwip_pair server FD LOCAL_IP SECONDS | lwip_pair client FD LOCAL_IP PEER_IP SECONDS
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lwip/init.h"
#include "lwip/ip4_addr.h"
#include "lwip/netif.h"
#include "lwip/pbuf.h"
#include "lwip/sockets.h"
#include "lwip/tcpip.h"

#define MTU 1420
#define PORT 5001

static int link_fd;
static struct netif nif;
static sem_t ready;

static double now_s(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_s(void) {
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static err_t link_output(struct netif *n, struct pbuf *p, const ip4_addr_t *dst) {
	(void)n;
	(void)dst;
	unsigned char buf[MTU];
	u16_t len = pbuf_copy_partial(p, buf, sizeof buf, 0);
	/* A full link queue is a drop, as on a wire: never block the stack's thread. */
	if (send(link_fd, buf, len, MSG_DONTWAIT) < 0 && errno != EAGAIN)
		perror("send");
	return ERR_OK;
}

static err_t nif_init(struct netif *n) {
	n->name[0] = 'l';
	n->name[1] = 'b';
	n->mtu = MTU;
	n->output = link_output;
	n->flags = NETIF_FLAG_UP | NETIF_FLAG_LINK_UP;
	return ERR_OK;
}

static void *rx_thread(void *arg) {
	(void)arg;
	unsigned char buf[65536];
	for (;;) {
		ssize_t len = recv(link_fd, buf, sizeof buf, 0);
		if (len <= 0)
			return NULL;
		/* PBUF_RAM: one block. PBUF_POOL chains overran their 616-byte blocks in pbuf_take
		 * (valgrind) with Debian 2.1.3+dfsg1-2 built MEMP_MEM_MALLOC. */
		struct pbuf *p = pbuf_alloc(PBUF_RAW, (u16_t)len, PBUF_RAM);
		if (!p)
			continue;
		pbuf_take(p, buf, (u16_t)len);
		if (nif.input(p, &nif) != ERR_OK)
			pbuf_free(p);
	}
}

static void init_done(void *arg) {
	(void)arg;
	sem_post(&ready);
}

static void bring_up(const char *local) {
	ip4_addr_t ip, mask, gw;
	sem_init(&ready, 0, 0);
	tcpip_init(init_done, NULL);
	sem_wait(&ready);
	ip4addr_aton(local, &ip);
	ip4addr_aton("255.255.255.0", &mask);
	ip4_addr_set_zero(&gw);
	LOCK_TCPIP_CORE();
	netif_add(&nif, &ip, &mask, &gw, NULL, nif_init, tcpip_input);
	netif_set_default(&nif);
	netif_set_up(&nif);
	netif_set_link_up(&nif);
	UNLOCK_TCPIP_CORE();
	pthread_t t;
	pthread_create(&t, NULL, rx_thread, NULL);
}

static int server(double seconds) {
	int ls = lwip_socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(PORT)};
	if (lwip_bind(ls, (struct sockaddr *)&sa, sizeof sa) || lwip_listen(ls, 4))
		return perror("bind/listen"), 1;
	int c = lwip_accept(ls, NULL, NULL);
	static char buf[65536];
	long long total = lwip_recv(c, buf, sizeof buf, 0);
	double t0 = now_s(), c0 = cpu_s();
	while (now_s() - t0 < seconds) {
		int n = lwip_recv(c, buf, sizeof buf, 0);
		if (n <= 0)
			break;
		total += n;
	}
	double dt = now_s() - t0, dc = cpu_s() - c0;
	printf("lwip server: %lld bytes in %.2f s = %.1f Mbit/s; receiver CPU %.2f s = %.1f Mbit/s per CPU-second\n",
	       total, dt, total * 8 / dt / 1e6, dc, total * 8 / dc / 1e6);
	int wnd = 0;
	socklen_t wl = sizeof wnd;
	lwip_getsockopt(c, SOL_SOCKET, SO_RCVBUF, &wnd, &wl);
	printf("lwip server: SO_RCVBUF %d\n", wnd);
	fflush(stdout);
	return 0;
}

static int client(const char *peer, double seconds) {
	int s = lwip_socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(PORT)};
	inet_pton(AF_INET, peer, &sa.sin_addr);
	for (int i = 0; lwip_connect(s, (struct sockaddr *)&sa, sizeof sa); i++) {
		if (i > 50)
			return perror("connect"), 1;
		lwip_close(s);
		s = lwip_socket(AF_INET, SOCK_STREAM, 0);
		usleep(100000);
	}
	static char buf[65536];
	double t0 = now_s();
	while (now_s() - t0 < seconds + 5)
		if (lwip_send(s, buf, sizeof buf, 0) < 0)
			break;
	return 0;
}

int main(int argc, char **argv) {
	if (argc < 5)
		return fprintf(stderr, "usage: see the header comment\n"), 2;
	link_fd = atoi(argv[2]);
	bring_up(argv[3]);
	if (!strcmp(argv[1], "server"))
		return server(atof(argv[4]));
	return client(argv[4], atof(argv[5]));
}
