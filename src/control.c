/* Runtime control: the watched control file and the pacing of vmem_step_end.
 *
 * One watcher thread per instance watches the JSON file named by
 * cfg.control_file.  It watches the file's DIRECTORY with inotify, so a file
 * created later or replaced by rename is seen, as is the swap of a symbolic
 * link in that directory on the way to the file (a Kubernetes ConfigMap
 * volume's ..data), and re-checks the file's identity (inode, size, mtime)
 * every second as a safety net (network file systems, links elsewhere
 * swapped underneath); without inotify it polls that identity every 100 ms.  A good file becomes the setting in force at the
 * next vmem_step_end (or at once with cfg.control_immediate); a bad one
 * (missing, empty, partial, malformed, not a regular file: a FIFO or a
 * device is refused before it is opened, so nothing here ever blocks on the
 * path) logs one error per distinct bad state and changes nothing.  See
 * docs/control.md for the format. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef VMEM_HAVE_CJSON
#include <cjson/cJSON.h>

#include "control_format.h"
#endif

#include "safefile.h"
#include "vmem_internal.h"

int control_force_poll;

#define POLL_MS 100          /* identity check without inotify */
#define RESCAN_MS 1000       /* identity check with inotify (safety net) */
#define DEBOUNCE_MS 30       /* quiet time after a change before reading */
#define DEBOUNCE_MAX_MS 500  /* read anyway when changes never stop */
#define MAX_FILE ((size_t)1 << 20)
#define MAX_PACE_SECONDS 600.0
#define CHAIN_MAX 8          /* symbolic links followed inside the directory */

/* One parsed control file: has_* say which keys it set. */
typedef struct control_setting {
    int has_limit, has_host_limit, has_host_fallback, has_perf;
    size_t limit, host_limit;
    int host_fallback, perf;
} control_setting_t;

/* What identifies one version of the file without reading it. */
typedef struct file_sig {
    int exists;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
} file_sig_t;

enum file_state { FILE_OK, FILE_MISSING, FILE_BAD };

/*
 * The watcher of one instance.
 * Invariants (under lock):
 *  - file is the last good setting read; applied is the one last applied
 *    from the file; pending == (file_gen != applied_gen);
 *  - state/bad_hash describe the last read; an error is logged only when
 *    they change, so one bad state logs once however often it is re-read;
 *  - pacing counts threads inside control_pace's wait; control_stop does
 *    not free the watcher before it is 0.
 * path, dir, name, bus_id, wake_fd are fixed after control_start; ino_fd,
 * ino_wd and sig belong to the watcher thread.
 */
struct control {
    vmem_t *v;
    char *path, *dir, *name;
    char bus_id[32];            /* "0000:3b:00.0" or "sim:<device>"; "" if unknown */
    pthread_t thread;
    int wake_fd;                /* eventfd: control_stop wakes the thread */
    int ino_fd, ino_wd;         /* ino_fd -1: polling */
    atomic_int inotify_on;      /* ino_fd >= 0, readable from other threads */
    file_sig_t sig;             /* identity of the last version read */

    pthread_mutex_t lock;
    pthread_cond_t cond;        /* perf changed, stopping, or a pacer left */
    pthread_mutex_t apply_lock; /* recursive: serialises applies, even from callbacks */
    int stopping;
    control_setting_t file, applied;
    uint64_t file_gen, applied_gen;
    atomic_int pending;
    enum file_state state;
    uint64_t bad_hash, good_hash;
    uint64_t reads, good, errors;
    uint64_t rescans;           /* changes found by the identity re-check */
    int pacing, suspended;
    int boundary_work;          /* a change arrived while suspended: the
                                   suspended thread moves memory (step end's) */
    /* Names in dir that resolving path passes through besides name itself
     * (a ConfigMap volume: ..data, ..<timestamp>); the watcher thread's. */
    char *links[CHAIN_MAX];
    int nlinks;
};

static void inotify_close(struct control *c)
{
    if (c->ino_fd >= 0)
        close(c->ino_fd);
    c->ino_fd = -1;
    c->ino_wd = -1;
    atomic_store(&c->inotify_on, 0);
}

static void links_clear(struct control *c)
{
    for (int i = 0; i < c->nlinks; i++)
        free(c->links[i]);
    c->nlinks = 0;
}

static void control_free(struct control *c)
{
    links_clear(c);
    inotify_close(c);
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->apply_lock);
    pthread_cond_destroy(&c->cond);
    free(c->path);
    free(c->dir);
    free(c->name);
    free(c);
}

#ifdef VMEM_HAVE_CJSON

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static uint64_t text_hash(const char *s, size_t n, uint64_t seed)
{
    uint64_t h = 1469598103934665603ull ^ seed;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int sig_equal(const file_sig_t *a, const file_sig_t *b)
{
    if (a->exists != b->exists)
        return 0;
    if (!a->exists)
        return 1;
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
           a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

static void sig_from_stat(file_sig_t *s, const struct stat *st)
{
    memset(s, 0, sizeof *s);
    s->exists = 1;
    s->dev = st->st_dev;
    s->ino = st->st_ino;
    s->size = st->st_size;
    s->mtime = st->st_mtim;
    s->ctime = st->st_ctim;
}

static void sig_read(const char *path, file_sig_t *s)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        memset(s, 0, sizeof *s);
        return;
    }
    sig_from_stat(s, &st);
}

static int setting_equal(const control_setting_t *a, const control_setting_t *b)
{
    return a->has_limit == b->has_limit && (!a->has_limit || a->limit == b->limit) &&
           a->has_host_limit == b->has_host_limit &&
           (!a->has_host_limit || a->host_limit == b->host_limit) &&
           a->has_host_fallback == b->has_host_fallback &&
           (!a->has_host_fallback || a->host_fallback == b->host_fallback) &&
           a->has_perf == b->has_perf && (!a->has_perf || a->perf == b->perf);
}

/* "limit=8589934592 perf=50" (the keys s sets), for log lines. */
static void setting_describe(const control_setting_t *s, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
#define ADD(...) n += (size_t)snprintf(buf + n, n < len ? len - n : 0, __VA_ARGS__)
    if (s->has_limit)
        ADD("limit=%zu ", s->limit);
    if (s->has_host_limit)
        ADD("host_limit=%zu ", s->host_limit);
    if (s->has_host_fallback)
        ADD("host_fallback=%s ", s->host_fallback ? "true" : "false");
    if (s->has_perf)
        ADD("perf=%d ", s->perf);
#undef ADD
    if (n == 0)
        snprintf(buf, len, "no keys for this device");
    else if (n <= len)
        buf[n - 1] = '\0';
}

/* 1 if key (a per-GPU entry's name) names this instance's device.  PCI ids
 * compare by value, so "00000000:3B:00.0" (nvidia-smi) matches
 * "0000:3b:00.0" (CUDA); simulated ids compare as text, ignoring case. */
int control_bus_id_match(const char *key, const char *mine)
{
    return *mine && control_gpu_key_same(key, mine);
}

/* ------------------------------------------------------------------------ */
/* Parsing                                                                  */
/* ------------------------------------------------------------------------ */

static int json_size(const cJSON *it, size_t *out)
{
    if (cJSON_IsString(it))
        return vmem_parse_size(it->valuestring, out) == VMEM_OK ? 0 : -1;
    if (!cJSON_IsNumber(it))
        return -1;
    double d = it->valuedouble;
    if (!(d >= 0) || d >= 18446744073709551616.0 || d != (double)(unsigned long long)d)
        return -1;
    *out = (size_t)(unsigned long long)d;
    return 0;
}

/* Reads the keys of one object (the top level or a per-GPU entry) into *s.
 * Unknown keys are ignored (listed in unknown); bus-id keys are skipped
 * here.  Returns -1 with why filled on a bad value. */
static int keys_parse(const cJSON *obj, control_setting_t *s, char *why, size_t wlen,
                      char *unknown, size_t ulen)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, obj)
    {
        const char *k = it->string;
        if (!strcmp(k, "limit") || !strcmp(k, "mem_limit")) {
            if (json_size(it, &s->limit) != 0)
                goto bad_size;
            s->has_limit = 1;
        } else if (!strcmp(k, "host_limit")) {
            if (json_size(it, &s->host_limit) != 0)
                goto bad_size;
            s->has_host_limit = 1;
        } else if (!strcmp(k, "host_fallback")) {
            if (cJSON_IsBool(it))
                s->host_fallback = cJSON_IsTrue(it);
            else if (cJSON_IsNumber(it) && (it->valuedouble == 0 || it->valuedouble == 1))
                s->host_fallback = it->valuedouble == 1;
            else {
                snprintf(why, wlen, "\"%s\" must be true or false", k);
                return -1;
            }
            s->has_host_fallback = 1;
        } else if (!strcmp(k, "perf")) {
            double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
            if (!(d >= 0 && d <= 100) || d != (double)(int)d) {
                snprintf(why, wlen, "\"perf\" must be an integer from 0 to 100");
                return -1;
            }
            s->perf = (int)d;
            s->has_perf = 1;
        } else if ((!strchr(k, ':') || !control_gpu_key_valid(k)) && unknown) {
            size_t n = strlen(unknown);
            if (n + strlen(k) + 4 < ulen)
                snprintf(unknown + n, ulen - n, "%s\"%s\"", n ? ", " : "", k);
        }
        continue;
    bad_size:
        snprintf(why, wlen, "\"%s\" must be a size (bytes, or a string such as \"8G\")", k);
        return -1;
    }
    return 0;
}

/* 1 if a string of the JSON text holds an escaped NUL (\u0000): cJSON ends
 * the string there, so "8G\u0000junk" would read as "8G" and a key
 * "limit\u0000x" as "limit". */
static int has_nul_escape(const char *text, size_t len)
{
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '"') {
            in_string = !in_string;
        } else if (in_string && text[i] == '\\' && i + 1 < len) {
            i++; /* the escaped character */
            if (text[i] == 'u' && i + 4 < len && !strncmp(text + i + 1, "0000", 4))
                return 1;
        }
    }
    return 0;
}

/* Parses the file's text (NUL-terminated, len bytes) into *out.  Returns 0,
 * or -1 with why filled. */
static int setting_parse(struct control *c, const char *text, size_t len, control_setting_t *out,
                         char *why, size_t wlen, char *unknown, size_t ulen)
{
    memset(out, 0, sizeof *out);
    if (memchr(text, '\0', len) || has_nul_escape(text, len)) {
        snprintf(why, wlen, "contains a NUL byte");
        return -1;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
    if (!root) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : len;
        snprintf(why, wlen, "not valid JSON (at byte %zu of %zu%s)", at, len,
                 at >= len ? ": truncated?" : "");
        return -1;
    }
    int rc = -1;
    if (!cJSON_IsObject(root)) {
        snprintf(why, wlen, "the top level must be a JSON object");
        goto done;
    }
    if (control_json_exact(root, text, len, 0) != 0) { /* sizes >= 2^53 read exactly */
        snprintf(why, wlen, "out of memory");
        goto done;
    }
    if (keys_parse(root, out, why, wlen, unknown, ulen) != 0)
        goto done;
    /* AntMan's per-GPU form: {"0000:3b:00.0": {"mem_limit": ...}}.  Only
     * this device's entry is read (and checked); it overrides the top level. */
    const cJSON *it;
    cJSON_ArrayForEach(it, root)
    {
        if (!strchr(it->string, ':') || !control_bus_id_match(it->string, c->bus_id))
            continue;
        if (!cJSON_IsObject(it)) {
            snprintf(why, wlen, "entry \"%s\" must be an object", it->string);
            goto done;
        }
        char sub[200];
        control_setting_t g = *out;
        if (keys_parse(it, &g, sub, sizeof sub, NULL, 0) != 0) {
            snprintf(why, wlen, "entry \"%s\": %s", it->string, sub);
            goto done;
        }
        *out = g;
    }
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Reading the file                                                         */
/* ------------------------------------------------------------------------ */

/* Records a bad state; logs only when it differs from the last one.  A new
 * bad state is published (state, count) in one step once its line is out:
 * whoever reads them (vmemctl, the stats JSON, a test) sees the error state
 * only with its count and its line logged.  Only the watcher thread (and
 * control_start before it runs) reads the file, so nothing changes the
 * state between the check and the publication. */
static void state_bad(struct control *c, enum file_state st, uint64_t h, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void state_bad(struct control *c, enum file_state st, uint64_t h, const char *fmt, ...)
{
    pthread_mutex_lock(&c->lock);
    int fresh = c->state != st || c->bad_hash != h;
    int have_good = c->file_gen > 0;
    pthread_mutex_unlock(&c->lock);
    if (fresh) {
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        vmem_log(c->v, VMEM_LOG_ERROR, "control file %s: %s; %s", c->path, msg,
                 have_good ? "keeping the last good setting" : "nothing applied from it yet");
    }
    pthread_mutex_lock(&c->lock);
    c->state = st;
    c->bad_hash = h;
    c->good_hash = 0;
    if (fresh)
        c->errors++;
    pthread_mutex_unlock(&c->lock);
}

/* Reads at most MAX_FILE bytes of fd into a NUL-terminated buffer; a file
 * of exactly MAX_FILE bytes is read, one byte more sets *too_big. */
static char *fd_slurp(int fd, size_t *len, int *too_big)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    *too_big = 0;
    while (buf) {
        if (n == cap) {
            if (cap >= MAX_FILE) {
                char extra;
                ssize_t r = read(fd, &extra, 1); /* at the end already? */
                if (r < 0 && errno == EINTR)
                    continue;
                if (r == 0) {
                    buf[n] = '\0';
                    *len = n;
                    return buf;
                }
                if (r > 0)
                    *too_big = 1;
                break;
            }
            char *nb = realloc(buf, cap * 2 + 1);
            if (!nb)
                break;
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            break;
        if (r == 0) {
            buf[n] = '\0';
            *len = n;
            return buf;
        }
        n += (size_t)r;
    }
    free(buf);
    return NULL;
}

/* Reads the file once and records what it says.  initial: called from
 * control_start (a missing file is then expected, not an error). */
static void file_read(struct control *c, int initial)
{
    pthread_mutex_lock(&c->lock);
    c->reads++;
    pthread_mutex_unlock(&c->lock);

    /* Never blocks: a FIFO, a device or a directory at the path is refused
     * (after following symlinks) before it is opened. */
    char why_open[96];
    int fd = safefile_open_read(c->path, why_open, sizeof why_open);
    if (fd < 0) {
        int e = errno;
        struct stat lst;
        if (e == EINVAL && stat(c->path, &lst) == 0) {
            sig_from_stat(&c->sig, &lst); /* refused: re-read only when it changes */
            state_bad(c, FILE_BAD, text_hash(why_open, strlen(why_open), 3), "%s", why_open);
            return;
        }
        memset(&c->sig, 0, sizeof c->sig);
        if (e == ENOENT && initial) {
            pthread_mutex_lock(&c->lock);
            c->state = FILE_MISSING;
            pthread_mutex_unlock(&c->lock);
            vmem_log(c->v, VMEM_LOG_INFO, "control file %s: does not exist yet; waiting for it",
                     c->path);
        } else if (e == ENOENT) {
            state_bad(c, FILE_MISSING, 0, "deleted or missing");
        } else {
            state_bad(c, FILE_BAD, (uint64_t)e, "cannot open: %s", strerror(e));
        }
        return;
    }
    struct stat st;
    if (fstat(fd, &st) == 0)
        sig_from_stat(&c->sig, &st);
    size_t len = 0;
    int too_big = 0;
    char *text = fd_slurp(fd, &len, &too_big);
    int e = errno;
    close(fd);
    if (!text) {
        if (too_big)
            state_bad(c, FILE_BAD, 1, "larger than %zu bytes", MAX_FILE);
        else
            state_bad(c, FILE_BAD, (uint64_t)e + 2, "cannot read: %s", strerror(e));
        return;
    }
    uint64_t h = text_hash(text, len, 7);
    pthread_mutex_lock(&c->lock);
    int same = c->state == FILE_OK && c->good_hash == h;
    pthread_mutex_unlock(&c->lock);
    if (same) { /* touched or rewritten with the same content */
        free(text);
        return;
    }
    size_t ws = 0;
    while (ws < len && (text[ws] == ' ' || text[ws] == '\t' || text[ws] == '\n' || text[ws] == '\r'))
        ws++;
    if (ws == len) {
        free(text);
        state_bad(c, FILE_BAD, h, "empty");
        return;
    }
    control_setting_t s;
    char why[256], unknown[256] = "";
    int rc = setting_parse(c, text, len, &s, why, sizeof why, unknown, sizeof unknown);
    free(text);
    if (rc != 0) {
        state_bad(c, FILE_BAD, h, "%s", why);
        return;
    }
    if (*unknown)
        vmem_log(c->v, VMEM_LOG_WARN, "control file %s: ignoring unknown key(s) %s", c->path,
                 unknown);
    pthread_mutex_lock(&c->lock);
    int recovered = c->state != FILE_OK && c->errors > 0;
    int changed = !setting_equal(&s, &c->file) || c->file_gen == 0;
    int perf_changed = s.has_perf && (!c->file.has_perf || c->file.perf != s.perf);
    c->state = FILE_OK;
    c->bad_hash = 0;
    c->good_hash = h;
    c->good++;
    if (changed) {
        c->file = s;
        c->file_gen++;
        atomic_store(&c->pending, 1);
    }
    if (perf_changed) {
        /* perf is only read at step ends, so it is stored at once: a job
         * suspended at perf 0 resumes as soon as the value changes. */
        atomic_store(&c->v->perf, s.perf);
        pthread_cond_broadcast(&c->cond);
    }
    pthread_mutex_unlock(&c->lock);
    if (recovered)
        vmem_log(c->v, VMEM_LOG_WARN, "control file %s: readable again", c->path);
    if (changed) {
        char what[200];
        setting_describe(&s, what, sizeof what);
        vmem_log(c->v, VMEM_LOG_INFO, "control file %s: new setting: %s%s", c->path, what,
                 c->v->cfg.control_immediate || initial ? "" : "; applied at the next step end");
    }
    int handed = 0;
    if (changed && !initial) {
        /* a job suspended at perf 0 sits at its step boundary: its own
         * thread applies the change there and moves memory as a step end
         * would (a cut below live on vmm evicts), then waits again */
        pthread_mutex_lock(&c->lock);
        if (c->suspended > 0) {
            c->boundary_work = handed = 1;
            pthread_cond_broadcast(&c->cond);
        }
        pthread_mutex_unlock(&c->lock);
    }
    if (changed && c->v->cfg.control_immediate && !initial && !handed) {
        control_apply_pending(c->v);
        /* a job suspended at perf 0 writes no statistics at step ends: the
         * scheduler would not see a cut it asked for take effect */
        if (c->v->stats_file)
            stats_write_file(c->v, c->v->stats_file);
    }
}

/* ------------------------------------------------------------------------ */
/* The watcher thread                                                       */
/* ------------------------------------------------------------------------ */

static void inotify_open(struct control *c)
{
    c->ino_fd = -1;
    c->ino_wd = -1;
    if (control_force_poll)
        return;
    c->ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (c->ino_fd < 0) {
        vmem_log(c->v, VMEM_LOG_INFO, "control file %s: inotify unavailable (%s); polling",
                 c->path, strerror(errno));
        return;
    }
    c->ino_wd = inotify_add_watch(c->ino_fd, c->dir,
                                  IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB | IN_CREATE | IN_DELETE |
                                      IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF |
                                      IN_ONLYDIR);
    if (c->ino_wd < 0) {
        vmem_log(c->v, VMEM_LOG_WARN, "control file %s: cannot watch directory %s (%s); polling",
                 c->path, c->dir, strerror(errno));
        inotify_close(c);
        return;
    }
    atomic_store(&c->inotify_on, 1);
}

/* Records the names in the watched directory that resolving the control
 * file passes through.  A Kubernetes ConfigMap volume delivers the file as
 * name -> ..data/name, ..data -> ..<timestamp>, and updates it by renaming a
 * new ..data link over the old one: no event names the file, but one names
 * ..data.  Links leaving the directory are not followed (the identity
 * re-check covers them). */
static void links_update(struct control *c)
{
    links_clear(c);
    char cur[256];
    snprintf(cur, sizeof cur, "%s", c->name);
    size_t dlen = strlen(c->dir);
    while (c->nlinks < CHAIN_MAX) {
        char p[4096], t[4096];
        snprintf(p, sizeof p, "%s/%s", c->dir, cur);
        ssize_t n = readlink(p, t, sizeof t - 1);
        if (n <= 0)
            break;
        t[n] = '\0';
        char *rel = t;
        if (t[0] == '/') { /* absolute, but maybe into the same directory */
            if (strncmp(t, c->dir, dlen) != 0 || t[dlen] != '/')
                break;
            rel = t + dlen + 1;
        }
        char *slash = strchr(rel, '/');
        if (slash)
            *slash = '\0';
        if (!*rel || !strcmp(rel, ".") || !strcmp(rel, "..") || strlen(rel) >= sizeof cur)
            break;
        snprintf(cur, sizeof cur, "%s", rel);
        char *copy = strdup(cur);
        if (!copy)
            break;
        c->links[c->nlinks++] = copy;
    }
}

/* 1 if an event's name is the control file or a link on the way to it. */
static int name_watched(const struct control *c, const char *name)
{
    if (strcmp(name, c->name) == 0)
        return 1;
    for (int i = 0; i < c->nlinks; i++)
        if (strcmp(name, c->links[i]) == 0)
            return 1;
    return 0;
}

/* Drains the inotify queue.  Returns 1 if an event concerns the file (or
 * the watch was lost, in which case the watcher falls back to polling). */
static int inotify_drain(struct control *c)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    int hit = 0, lost = 0;
    for (;;) {
        ssize_t n = read(c->ino_fd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT))
                lost = 1;
            if (ev->mask & IN_Q_OVERFLOW)
                hit = 1;
            if (ev->len && name_watched(c, ev->name))
                hit = 1;
            p += sizeof *ev + ev->len;
        }
    }
    if (lost) {
        vmem_log(c->v, VMEM_LOG_WARN, "control file %s: directory watch lost; polling", c->path);
        inotify_close(c);
        hit = 1;
    }
    return hit;
}

/* Milliseconds from now until t (0 if past). */
static int ms_until(double t, double now)
{
    return t <= now ? 0 : (int)((t - now) * 1e3) + 1;
}

/* The watcher: waits for inotify events about the file (or, polling, for a
 * change of its identity), lets a change settle for DEBOUNCE_MS of quiet
 * (DEBOUNCE_MAX_MS at most), then reads the file.  Ends when control_stop
 * writes the eventfd. */
static void *watcher_main(void *arg)
{
    struct control *c = arg;
    int dirty = 0;
    double dirty_since = 0, last_event = 0, last_check = vmem_now();
    for (;;) {
        double now = vmem_now();
        double period = (c->ino_fd >= 0 ? RESCAN_MS : POLL_MS) * 1e-3;
        double due = last_check + period;
        if (dirty) {
            due = last_event + DEBOUNCE_MS * 1e-3;
            if (dirty_since + DEBOUNCE_MAX_MS * 1e-3 < due)
                due = dirty_since + DEBOUNCE_MAX_MS * 1e-3;
        }
        struct pollfd fds[2] = {{.fd = c->wake_fd, .events = POLLIN},
                                {.fd = c->ino_fd, .events = POLLIN}};
        int nfds = c->ino_fd >= 0 ? 2 : 1;
        int n = poll(fds, (nfds_t)nfds, ms_until(due, now));
        if (n < 0 && errno != EINTR) {
            vmem_log(c->v, VMEM_LOG_ERROR, "control file %s: watcher stopped: poll: %s", c->path,
                     strerror(errno));
            break;
        }
        if (n > 0 && fds[0].revents)
            break; /* control_stop */
        now = vmem_now();
        if (n > 0 && nfds == 2 && fds[1].revents && inotify_drain(c)) {
            if (!dirty)
                dirty_since = now;
            dirty = 1;
            last_event = now;
        }
        if (dirty) {
            if (now - last_event >= DEBOUNCE_MS * 1e-3 ||
                now - dirty_since >= DEBOUNCE_MAX_MS * 1e-3) {
                dirty = 0;
                last_check = now;
                file_read(c, 0);
                links_update(c); /* a swap points ..data at a new directory */
            }
            continue;
        }
        if (now - last_check >= period) {
            last_check = now;
            file_sig_t sig;
            sig_read(c->path, &sig);
            if (!sig_equal(&sig, &c->sig)) {
                pthread_mutex_lock(&c->lock);
                c->rescans++;
                pthread_mutex_unlock(&c->lock);
                dirty = 1; /* read after DEBOUNCE_MS, in case a write is under way */
                dirty_since = last_event = now;
            }
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Start / stop                                                             */
/* ------------------------------------------------------------------------ */

/* Splits path into an absolute directory and a file name. */
static int path_split(struct control *c, const char *path)
{
    char *abs = NULL;
    if (path[0] == '/') {
        abs = strdup(path);
    } else {
        char cwd[4096];
        if (!getcwd(cwd, sizeof cwd))
            return -1;
        size_t n = strlen(cwd) + strlen(path) + 2;
        abs = malloc(n);
        if (abs)
            snprintf(abs, n, "%s/%s", cwd, path);
    }
    if (!abs)
        return -1;
    char *slash = strrchr(abs, '/');
    c->path = abs;
    c->name = strdup(slash + 1);
    c->dir = slash == abs ? strdup("/") : strndup(abs, (size_t)(slash - abs));
    return c->name && c->dir && *c->name ? 0 : -1;
}

vmem_status_t control_start(vmem_t *v, const char *path)
{
    struct control *c = calloc(1, sizeof *c);
    if (!c)
        return VMEM_ERR_NOMEM;
    c->v = v;
    c->wake_fd = -1;
    c->ino_fd = -1;
    c->file.perf = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&c->apply_lock, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (path_split(c, path) != 0) {
        vmem_log(v, VMEM_LOG_ERROR, "control file %s: invalid path", path);
        control_free(c);
        return VMEM_ERR_INVALID;
    }
    if (v->dev_backend->flags & BACKEND_F_SIMULATED) {
        snprintf(c->bus_id, sizeof c->bus_id, "sim:%d", v->cfg.device);
    } else if (backend_cuda_pci_bus_id(v->cfg.device, c->bus_id, sizeof c->bus_id) != VMEM_OK) {
        c->bus_id[0] = '\0';
        vmem_log(v, VMEM_LOG_WARN,
                 "control file %s: PCI bus id of device %d unknown; per-GPU entries are ignored",
                 c->path, v->cfg.device);
    }
    c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->wake_fd < 0) {
        vmem_log(v, VMEM_LOG_ERROR, "control file %s: eventfd: %s", c->path, strerror(errno));
        control_free(c);
        return VMEM_ERR_IO;
    }
    v->control = c;
    /* Watch first, then read: a change between the two is not lost. */
    inotify_open(c);
    file_read(c, 1);
    links_update(c);
    control_apply_pending(v); /* the file's setting at start is applied at once */
    int e = pthread_create(&c->thread, NULL, watcher_main, c);
    if (e != 0) {
        vmem_log(v, VMEM_LOG_ERROR, "control file %s: cannot start the watcher: %s", c->path,
                 strerror(e));
        v->control = NULL;
        control_free(c);
        return VMEM_ERR_IO;
    }
    vmem_log(v, VMEM_LOG_INFO, "control file %s: watching (%s, device id %s)", c->path,
             atomic_load(&c->inotify_on) ? "inotify" : "polling", *c->bus_id ? c->bus_id : "unknown");
    return VMEM_OK;
}

#else /* !VMEM_HAVE_CJSON */

vmem_status_t control_start(vmem_t *v, const char *path)
{
    vmem_log(v, VMEM_LOG_ERROR,
             "control file %s: libvmem was built without cJSON (meson option cjson), so control "
             "files are not supported",
             path);
    return VMEM_ERR_UNSUPPORTED;
}

#endif /* VMEM_HAVE_CJSON */

void control_stop(vmem_t *v)
{
    struct control *c = v->control;
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->stopping = 1;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    uint64_t one = 1;
    if (write(c->wake_fd, &one, sizeof one) != (ssize_t)sizeof one)
        vmem_log(v, VMEM_LOG_ERROR, "control file %s: cannot wake the watcher", c->path);
    pthread_join(c->thread, NULL);
    pthread_mutex_lock(&c->lock);
    while (c->pacing > 0)
        pthread_cond_wait(&c->cond, &c->lock);
    pthread_mutex_unlock(&c->lock);
    v->control = NULL;
    control_free(c);
}

/* ------------------------------------------------------------------------ */
/* Applying                                                                 */
/* ------------------------------------------------------------------------ */

/* Applies the keys of now that differ from before (what was applied last). */
static void setting_apply(vmem_t *v, const char *path, const control_setting_t *before,
                          const control_setting_t *now)
{
    if (now->has_limit && (!before->has_limit || before->limit != now->limit)) {
        vmem_lock(&v->lock);
        size_t cap = v->start_cap;
        vmem_unlock(&v->lock);
        size_t target = now->limit;
        if (target > cap) {
            vmem_log(v, VMEM_LOG_WARN,
                     "control file %s: limit %zu is above the start cap %zu; using %zu", path,
                     target, cap, cap);
            target = cap;
        }
        size_t held = 0;
        vmem_status_t st = vmem_apply_limit(v, target, 0, &held);
        if (st != VMEM_OK && st != VMEM_PENDING)
            vmem_log(v, VMEM_LOG_ERROR, "control file %s: limit %zu: %s", path, target,
                     vmem_strerror(st));
    }
    if (now->has_host_limit && (!before->has_host_limit || before->host_limit != now->host_limit)) {
        vmem_status_t st = vmem_set_host_limit(v, now->host_limit);
        if (st != VMEM_OK && st != VMEM_PENDING)
            vmem_log(v, VMEM_LOG_ERROR, "control file %s: host_limit %zu: %s", path,
                     now->host_limit, vmem_strerror(st));
    }
    if (now->has_host_fallback &&
        (!before->has_host_fallback || before->host_fallback != now->host_fallback))
        vmem_set_host_fallback(v, now->host_fallback);
    if (now->has_perf)
        atomic_store(&v->perf, now->perf);
}

void control_apply_pending(vmem_t *v)
{
    struct control *c = v->control;
    if (!c || !atomic_load(&c->pending))
        return;
    pthread_mutex_lock(&c->apply_lock);
    pthread_mutex_lock(&c->lock);
    int todo = c->file_gen != c->applied_gen;
    control_setting_t before = c->applied, now = c->file;
    c->applied = c->file;
    c->applied_gen = c->file_gen;
    atomic_store(&c->pending, 0);
    pthread_mutex_unlock(&c->lock);
    if (todo)
        setting_apply(v, c->path, &before, &now);
    pthread_mutex_unlock(&c->apply_lock);
}

/* ------------------------------------------------------------------------ */
/* Pacing                                                                   */
/* ------------------------------------------------------------------------ */

static struct timespec deadline_ts(double t)
{
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

int control_pace(vmem_t *v, double step_seconds)
{
    struct control *c = v->control;
    if (!c || atomic_load(&v->perf) >= 100)
        return 0;
    double start = vmem_now();
    int was_suspended = 0, here = 0;
    pthread_mutex_lock(&c->lock);
    c->pacing++;
    while (!c->stopping) {
        int perf = atomic_load(&v->perf);
        if (perf >= 100)
            break;
        if (perf <= 0) {
            if (!here) {
                here = was_suspended = 1;
                c->suspended++;
                vmem_log(v, VMEM_LOG_INFO, "perf 0: suspended at the step boundary");
            }
            if (c->boundary_work) {
                c->boundary_work = 0;
                pthread_mutex_unlock(&c->lock);
                control_apply_pending(v);
                vmem_boundary_rebalance(v);
                pthread_mutex_lock(&c->lock);
                continue;
            }
            pthread_cond_wait(&c->cond, &c->lock);
            continue;
        }
        if (was_suspended)
            break; /* the suspension was this step's pause */
        /* share = step / (step + sleep) = perf / 100 */
        double sleep = step_seconds * (100.0 / perf - 1.0);
        if (sleep > MAX_PACE_SECONDS)
            sleep = MAX_PACE_SECONDS;
        double deadline = start + sleep;
        if (vmem_now() >= deadline)
            break;
        struct timespec ts = deadline_ts(deadline);
        pthread_cond_timedwait(&c->cond, &c->lock, &ts);
    }
    if (here)
        c->suspended--;
    int stop = c->stopping;
    c->pacing--;
    if (stop)
        pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    if (stop)
        return 1;
    if (was_suspended) {
        vmem_log(v, VMEM_LOG_INFO, "perf %d: resumed", atomic_load(&v->perf));
        control_apply_pending(v); /* still at the step boundary */
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Status                                                                   */
/* ------------------------------------------------------------------------ */

vmem_status_t control_get_status(vmem_t *v, control_status_t *out)
{
    if (!v || !out)
        return VMEM_ERR_INVALID;
    memset(out, 0, sizeof *out);
    out->perf = -1;
    struct control *c = v->control;
    if (!c)
        return VMEM_OK;
    pthread_mutex_lock(&c->lock);
    out->active = 1;
    out->inotify = atomic_load(&c->inotify_on);
    out->reads = c->reads;
    out->good = c->good;
    out->errors = c->errors;
    out->in_error = c->state != FILE_OK;
    out->pending = c->file_gen != c->applied_gen;
    out->suspended = c->suspended;
    out->has_limit = c->file.has_limit;
    out->limit = c->file.limit;
    out->perf = c->file.has_perf ? c->file.perf : -1;
    out->rescans = c->rescans;
    pthread_mutex_unlock(&c->lock);
    return VMEM_OK;
}
