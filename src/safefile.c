/* Opening and replacing user-named files safely; see safefile.h. */
#include "safefile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_LINKS 40 /* as the kernel's ELOOP limit */

const char *safefile_kind(mode_t mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    }
    return "an unknown kind of file";
}

static int refuse(char *why, size_t wlen, mode_t mode, const char *tail)
{
    snprintf(why, wlen, "not a regular file (%s)%s", safefile_kind(mode), tail);
    errno = EINVAL;
    return -1;
}

static int fail(char *why, size_t wlen)
{
    int e = errno;
    snprintf(why, wlen, "%s", strerror(e));
    errno = e;
    return -1;
}

int safefile_open_read(const char *path, char *why, size_t wlen)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return fail(why, wlen);
    if (!S_ISREG(st.st_mode))
        return refuse(why, wlen, st.st_mode, "");
    /* O_NONBLOCK: if a FIFO took the file's place since the stat, the open
     * returns at once and fstat below refuses it. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return fail(why, wlen);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int bad = errno;
        close(fd);
        if (!S_ISREG(st.st_mode))
            return refuse(why, wlen, st.st_mode, "");
        errno = bad;
        return fail(why, wlen);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

/* The target of the symlink at link, relative to the link's directory. */
static char *link_follow(const char *link)
{
    char buf[4096];
    ssize_t n = readlink(link, buf, sizeof buf - 1);
    if (n < 0)
        return NULL;
    buf[n] = '\0';
    const char *slash = strrchr(link, '/');
    size_t dlen = buf[0] == '/' || !slash ? 0 : (size_t)(slash - link + 1);
    char *out = malloc(dlen + (size_t)n + 1);
    if (!out)
        return NULL;
    memcpy(out, link, dlen);
    memcpy(out + dlen, buf, (size_t)n + 1);
    return out;
}

char *safefile_replace_target(const char *path, char *why, size_t wlen)
{
    char *cur = strdup(path);
    for (int hops = 0; cur; hops++) {
        struct stat st;
        if (lstat(cur, &st) != 0) {
            if (errno == ENOENT)
                return cur; /* nothing there (yet): created by the rename */
            fail(why, wlen);
            break;
        }
        if (S_ISREG(st.st_mode))
            return cur;
        if (!S_ISLNK(st.st_mode)) {
            refuse(why, wlen, st.st_mode, "; not replacing it");
            break;
        }
        if (hops == MAX_LINKS) {
            errno = ELOOP;
            fail(why, wlen);
            break;
        }
        char *next = link_follow(cur);
        if (!next)
            fail(why, wlen);
        free(cur);
        cur = next;
    }
    int e = errno;
    free(cur);
    errno = e;
    return NULL;
}

int safefile_temp(const char *target, char **tmp)
{
    const char *slash = strrchr(target, '/');
    int dlen = slash ? (int)(slash - target + 1) : 0;
    size_t n = strlen(target) + 16;
    char *name = malloc(n);
    if (!name)
        return -1;
    snprintf(name, n, "%.*s.%s.XXXXXX", dlen, target, target + dlen);
    int fd = mkostemp(name, O_CLOEXEC); /* O_CREAT | O_EXCL: never through a link */
    if (fd < 0) {
        int e = errno;
        free(name);
        errno = e;
        return -1;
    }
    *tmp = name;
    return fd;
}

int safefile_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, p + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return 0;
        done += (size_t)w;
    }
    return 1;
}
