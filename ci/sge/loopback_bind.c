/* LD_PRELOAD shim for the CI's Grid Engine daemons: a bind() to every interface binds to the
 * loopback address instead (Grid Engine has no setting for the address it listens on; the
 * tests keep every server on 127.0.0.1). Other binds pass unchanged. It removes itself from
 * the environment, so nothing the daemons start (shepherds, jobs) carries it. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

__attribute__((constructor)) static void forget_preload(void) { unsetenv("LD_PRELOAD"); }

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static int (*real_bind)(int, const struct sockaddr *, socklen_t);
    if (!real_bind)
        real_bind = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "bind");
    if (addr && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in local;
        memcpy(&local, addr, sizeof local);
        if (local.sin_addr.s_addr == htonl(INADDR_ANY)) {
            local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            return real_bind(fd, (const struct sockaddr *)&local, sizeof local);
        }
    }
    if (addr && addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 local;
        memcpy(&local, addr, sizeof local);
        if (!memcmp(&local.sin6_addr, &in6addr_any, sizeof in6addr_any)) {
            local.sin6_addr = in6addr_loopback;
            return real_bind(fd, (const struct sockaddr *)&local, sizeof local);
        }
    }
    return real_bind(fd, addr, len);
}
