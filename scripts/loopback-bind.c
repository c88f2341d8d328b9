/*
 * Preloaded with LD_PRELOAD by scripts/local-servers into DynamoDB Local
 * (Java), which has no option for its listen address and binds 0.0.0.0.
 * This library wraps bind(): a bind to the IPv4 wildcard address (0.0.0.0)
 * becomes a bind to 127.0.0.1, and one to the IPv6 wildcard (::) a bind to
 * ::1; the port and every other address are kept, and other socket families
 * (Unix sockets, netlink, ...) are passed through untouched. Java is started
 * with -Djava.net.preferIPv4Stack=true, so its server socket is an IPv4 one
 * and ends up on 127.0.0.1. Like scripts/node-loopback.js does for Node.
 *
 * Built by scripts/local-servers at install time:
 *   cc -shared -fPIC -O2 -o .local/lib/loopback-bind.so scripts/loopback-bind.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    /* The next bind() in the lookup order: libc's. A race between threads
     * at most looks it up twice, with the same result. */
    static bind_fn real_bind;
    if (real_bind == NULL) {
        real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
        if (real_bind == NULL) {
            errno = ENOSYS;
            return -1;
        }
    }

    if (addr != NULL && addr->sa_family == AF_INET &&
        len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in copy;
        memcpy(&copy, addr, sizeof copy);
        if (copy.sin_addr.s_addr == htonl(INADDR_ANY)) {
            copy.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            return real_bind(fd, (const struct sockaddr *)&copy, sizeof copy);
        }
    } else if (addr != NULL && addr->sa_family == AF_INET6 &&
               len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 copy;
        memcpy(&copy, addr, sizeof copy);
        if (memcmp(&copy.sin6_addr, &in6addr_any, sizeof in6addr_any) == 0) {
            copy.sin6_addr = in6addr_loopback;
            return real_bind(fd, (const struct sockaddr *)&copy, sizeof copy);
        }
    }
    return real_bind(fd, addr, len);
}
