/* Preloaded into sandboxes that run under gVisor (--runtime gvisor), and only there.
 *
 * Debian bookworm's runsc (2022-12-19) answers EINVAL to statx() and fstatat() called with
 * AT_NO_AUTOMOUNT, which coreutils passes on every call: `ls`, `stat`, `du -L` would fail on every
 * path. A sandbox has no automount points, so asking again without the flag gives the same answer
 * a newer gVisor would. Every other call and error goes through untouched. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

typedef int (*statx_fn)(int, const char *, int, unsigned int, struct statx *);
typedef int (*fstatat_fn)(int, const char *, void *, int);

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf) {
    static statx_fn next;
    if (!next) next = (statx_fn)dlsym(RTLD_NEXT, "statx");
    int rc = next(dirfd, path, flags, mask, buf);
    if (rc == -1 && errno == EINVAL && (flags & AT_NO_AUTOMOUNT))
        rc = next(dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
    return rc;
}

static int retry_fstatat(const char *name, int dirfd, const char *path, void *buf, int flags) {
    fstatat_fn next = (fstatat_fn)dlsym(RTLD_NEXT, name);
    int rc = next(dirfd, path, buf, flags);
    if (rc == -1 && errno == EINVAL && (flags & AT_NO_AUTOMOUNT))
        rc = next(dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT);
    return rc;
}

int fstatat(int dirfd, const char *path, struct stat *buf, int flags) {
    return retry_fstatat("fstatat", dirfd, path, buf, flags);
}

int fstatat64(int dirfd, const char *path, struct stat64 *buf, int flags) {
    return retry_fstatat("fstatat64", dirfd, path, buf, flags);
}
