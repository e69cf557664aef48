/* Trace loading and validation; see trace.h. */
#include "trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define LINE_MAX_LEN 1024

/* Open-addressing map from a live block id to its slot.
 * Invariant: count < cap / 2; used[i] == 0 marks an empty slot. */
typedef struct id_map {
    uint64_t *ids;
    uint32_t *slots;
    uint8_t *used;
    size_t cap, count;
} id_map_t;

static size_t id_hash(uint64_t id, size_t cap)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

static int id_map_init(id_map_t *m, size_t cap)
{
    m->ids = malloc(cap * sizeof *m->ids);
    m->slots = malloc(cap * sizeof *m->slots);
    m->used = calloc(cap, 1);
    m->cap = cap;
    m->count = 0;
    return (m->ids && m->slots && m->used) ? 0 : -1;
}

static void id_map_fini(id_map_t *m)
{
    free(m->ids);
    free(m->slots);
    free(m->used);
    memset(m, 0, sizeof *m);
}

/* Returns the index of id, or of the empty slot where it would go. */
static size_t id_map_find(const id_map_t *m, uint64_t id)
{
    size_t i = id_hash(id, m->cap);
    while (m->used[i] && m->ids[i] != id)
        i = (i + 1) & (m->cap - 1);
    return i;
}

static int id_map_put(id_map_t *m, uint64_t id, uint32_t slot)
{
    if ((m->count + 1) * 2 > m->cap) {
        id_map_t n;
        if (id_map_init(&n, m->cap * 2) != 0) {
            id_map_fini(&n);
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (m->used[i]) {
                size_t j = id_map_find(&n, m->ids[i]);
                n.used[j] = 1;
                n.ids[j] = m->ids[i];
                n.slots[j] = m->slots[i];
                n.count++;
            }
        }
        id_map_fini(m);
        *m = n;
    }
    size_t i = id_map_find(m, id);
    m->used[i] = 1;
    m->ids[i] = id;
    m->slots[i] = slot;
    m->count++;
    return 0;
}

/* Removes entry i (backward-shift deletion). */
static void id_map_remove_at(id_map_t *m, size_t i)
{
    size_t mask = m->cap - 1, j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->used[j])
            break;
        size_t home = id_hash(m->ids[j], m->cap);
        int in_between = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!in_between) {
            m->ids[i] = m->ids[j];
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    m->used[i] = 0;
    m->count--;
}

/* ------------------------------------------------------------------------ */

/* zlib's message without the "path: " prefix it adds. */
static const char *gz_message(gzFile gz, const char *path, int *zerr)
{
    const char *msg = gzerror(gz, zerr);
    size_t n = strlen(path);
    if (strncmp(msg, path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
        msg += n + 2;
    return msg;
}

/* Copies at most 16 bytes of s into out, replacing unprintable bytes. */
static const char *printable(const char *s, char out[20])
{
    size_t i = 0;
    for (; s[i] && i < 16; i++)
        out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    out[i] = '\0';
    return out;
}

/* Reads a gzip (or plain) file line by line with the lengths known, so a
 * NUL byte inside a line is seen (gzgets would end the line there).
 * Invariant: buf[pos, end) holds bytes read but not yet handed out.  An event
 * line is at most LINE_MAX_LEN - 2 bytes; a comment line ('#', such as the
 * header, whose step times grow with the steps recorded) may be of any
 * length: it is handed out cut to its first COMMENT_KEEP bytes. */
#define COMMENT_KEEP ((size_t)1 << 16)
typedef struct line_reader {
    gzFile gz;
    size_t pos, end;
    int eof;
    int cut; /* a comment line longer than the buffer is being read */
    char buf[1 << 17];
} line_reader_t;

enum { LINE_EOF = 0, LINE_OK = 1, LINE_ERROR = -1, LINE_LONG = -2 };

/* The next line (without its newline, NUL-terminated in place) in *line and
 * *len.  LINE_ERROR: zlib failed (truncated or corrupt data), also for a
 * last line cut short by it; LINE_LONG: an event line longer than
 * LINE_MAX_LEN - 2. */
static int line_next(line_reader_t *r, char **line, size_t *len)
{
    for (;;) {
        char *nl = memchr(r->buf + r->pos, '\n', r->end - r->pos);
        if (nl) {
            *line = r->buf + r->pos;
            *len = (size_t)(nl - *line);
            *nl = '\0';
            r->pos = (size_t)(nl - r->buf) + 1;
            if (r->cut) { /* the comment's head lies at buf[0, COMMENT_KEEP) */
                r->cut = 0;
                *len = COMMENT_KEEP;
                (*line)[*len] = '\0';
            }
            if (**line == '#')
                return LINE_OK;
            return *len > LINE_MAX_LEN - 2 ? LINE_LONG : LINE_OK;
        }
        if (r->end - r->pos > LINE_MAX_LEN - 2 && r->buf[r->pos] != '#')
            return LINE_LONG;
        if (r->eof) {
            int zerr;
            gzerror(r->gz, &zerr);
            if (zerr != Z_OK && zerr != Z_STREAM_END)
                return LINE_ERROR;
            if (r->pos == r->end)
                return LINE_EOF;
            *line = r->buf + r->pos; /* the last line, without a newline */
            *len = r->cut ? COMMENT_KEEP : r->end - r->pos;
            (*line)[*len] = '\0';
            r->pos = r->end;
            r->cut = 0;
            return LINE_OK;
        }
        memmove(r->buf, r->buf + r->pos, r->end - r->pos);
        r->end -= r->pos;
        r->pos = 0;
        if (r->end == sizeof r->buf - 1) { /* a comment that fills the buffer */
            r->cut = 1;
            r->end = COMMENT_KEEP + 1; /* its head, and one byte for the cut */
        }
        int n = gzread(r->gz, r->buf + r->end, (unsigned)(sizeof r->buf - 1 - r->end));
        if (n < 0)
            return LINE_ERROR;
        if (n == 0)
            r->eof = 1;
        r->end += (size_t)n;
    }
}

typedef struct loader {
    const char *name;
    size_t line;
    char *err;
    size_t errlen;
} loader_t;

static int load_fail(loader_t *ld, const char *fmt, ...)
{
    if (ld->err && ld->errlen) {
        int n = ld->line ? snprintf(ld->err, ld->errlen, "%s:%zu: ", ld->name, ld->line)
                         : snprintf(ld->err, ld->errlen, "%s: ", ld->name);
        if (n < 0)
            n = 0;
        if ((size_t)n < ld->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(ld->err + n, ld->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

/* Splits s on blanks into at most max tokens; returns the count (max + 1 if
 * there are more). */
static int split(char *s, char **tok, int max)
{
    int n = 0;
    for (;;) {
        while (*s == ' ' || *s == '\t')
            s++;
        if (!*s)
            return n;
        if (n == max)
            return max + 1;
        tok[n++] = s;
        while (*s && *s != ' ' && *s != '\t')
            s++;
        if (*s)
            *s++ = '\0';
    }
}

/* Parses a plain non-negative decimal integer (digits only). */
static int parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 4096;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

int trace_load(const char *path, trace_t *t, char *err, size_t errlen)
{
    return trace_load_max(path, TRACE_DEFAULT_MAX_EVENTS, t, err, errlen);
}

int trace_load_max(const char *path, size_t max_events, trace_t *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    const char *slash = strrchr(path, '/');
    loader_t ld = {slash ? slash + 1 : path, 0, err, errlen};
    if (err && errlen)
        err[0] = '\0';

    struct stat st; /* a FIFO is read as it comes (a pipe from zcat works) */
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return load_fail(&ld, "cannot open: a directory, not a trace");
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return load_fail(&ld, "cannot open: %s", strerror(errno ? errno : ENOENT));
    gzbuffer(gz, 1 << 17);

    id_map_t ids = {0};
    uint32_t *free_slots = NULL;
    uint64_t *slot_size = NULL; /* requested bytes of the block in each live slot */
    size_t slot_size_cap = 0;
    size_t nfree_slots = 0, free_slots_cap = 0;
    size_t cap_ev = 0, cap_t = 0, cap_s = 0, cap_m = 0;
    uint64_t live = 0;
    int rc = -1;
    line_reader_t *rd = malloc(sizeof *rd);

    t->path = strdup(path);
    if (!t->path || !rd || id_map_init(&ids, 1024) != 0) {
        load_fail(&ld, "out of memory");
        goto out;
    }
    rd->gz = gz;
    rd->pos = rd->end = 0;
    rd->eof = 0;
    rd->cut = 0;
    t->name = t->path + (ld.name - path);
    t->iters = -1;

    for (;;) {
        char *line = NULL;
        size_t len = 0;
        int got = line_next(rd, &line, &len);
        if (got == LINE_EOF)
            break;
        ld.line++;
        if (ld.line == 1 && gzdirect(gz) && strlen(path) > 3 &&
            strcmp(path + strlen(path) - 3, ".gz") == 0) {
            load_fail(&ld, "not gzip data");
            goto out;
        }
        if (got == LINE_ERROR) {
            int zerr;
            load_fail(&ld, "truncated or corrupt gzip data (%s)", gz_message(gz, path, &zerr));
            goto out;
        }
        if (got == LINE_LONG) {
            load_fail(&ld, "line longer than %d bytes", LINE_MAX_LEN - 2);
            goto out;
        }
        const char *nul = memchr(line, '\0', len);
        if (nul) {
            load_fail(&ld, "NUL byte in the line (at byte %zu)", (size_t)(nul - line) + 1);
            goto out;
        }
        if (len && line[len - 1] == '\r')
            line[--len] = '\0';
        if (line[0] == '#') {
            const char *it = ld.line == 1 ? strstr(line, "\"iters\":") : NULL;
            if (it)
                t->iters = strtol(it + 8, NULL, 10);
            continue;
        }
        char *tok[6];
        int n = split(line, tok, 5);
        if (n == 0)
            continue; /* blank line */
        trace_event_t ev = {0};
        uint64_t id, ts, stream = 0;
        if (strcmp(tok[0], "a") == 0) {
            if (n != 5) {
                load_fail(&ld, "malformed allocation: expected 'a <id> <size> <stream> <t_us>'");
                goto out;
            }
            if (parse_u64(tok[1], &id) != 0 || parse_u64(tok[2], &ev.size) != 0 ||
                parse_u64(tok[3], &stream) != 0 || parse_u64(tok[4], &ts) != 0) {
                load_fail(&ld, "malformed allocation: fields must be non-negative integers");
                goto out;
            }
            if (ev.size == 0 || ev.size > SIZE_MAX / 2) {
                load_fail(&ld, "allocation of block %llu: bad size %llu", (unsigned long long)id,
                          (unsigned long long)ev.size);
                goto out;
            }
            if (stream > UINT32_MAX) {
                load_fail(&ld, "stream id %llu out of range", (unsigned long long)stream);
                goto out;
            }
            size_t i = id_map_find(&ids, id);
            if (ids.used[i]) {
                load_fail(&ld, "allocation of block %llu, which is already live",
                          (unsigned long long)id);
                goto out;
            }
            uint32_t slot;
            if (nfree_slots) {
                slot = free_slots[--nfree_slots];
            } else {
                if (t->nslots >= UINT32_MAX) {
                    load_fail(&ld, "too many live blocks");
                    goto out;
                }
                slot = (uint32_t)t->nslots++;
            }
            if (id_map_put(&ids, id, slot) != 0) {
                load_fail(&ld, "out of memory");
                goto out;
            }
            if (grow((void **)&slot_size, &slot_size_cap, (size_t)slot + 1, sizeof *slot_size)) {
                load_fail(&ld, "out of memory");
                goto out;
            }
            if (live > UINT64_MAX - ev.size) {
                load_fail(&ld, "allocation of block %llu: live bytes pass 2^64",
                          (unsigned long long)id);
                goto out;
            }
            slot_size[slot] = ev.size;
            ev.slot = slot;
            live += ev.size;
            if (live > t->peak_live)
                t->peak_live = live;
            if (ev.size > t->max_size)
                t->max_size = ev.size;
            t->nallocs++;
        } else if (strcmp(tok[0], "f") == 0) {
            if (n != 3) {
                load_fail(&ld, "malformed free: expected 'f <id> <t_us>'");
                goto out;
            }
            if (parse_u64(tok[1], &id) != 0 || parse_u64(tok[2], &ts) != 0) {
                load_fail(&ld, "malformed free: fields must be non-negative integers");
                goto out;
            }
            size_t i = id_map_find(&ids, id);
            if (!ids.used[i]) {
                load_fail(&ld, "free of unknown block %llu (never allocated, or already freed)",
                          (unsigned long long)id);
                goto out;
            }
            ev.slot = ids.slots[i];
            ev.is_free = 1;
            live -= slot_size[ev.slot];
            id_map_remove_at(&ids, i);
            if (grow((void **)&free_slots, &free_slots_cap, nfree_slots + 1, sizeof *free_slots)) {
                load_fail(&ld, "out of memory");
                goto out;
            }
            free_slots[nfree_slots++] = ev.slot;
            t->nfrees++;
        } else if (strcmp(tok[0], "s") == 0) {
            if (n != 2 || parse_u64(tok[1], &ts) != 0) {
                load_fail(&ld, "malformed step boundary: expected 's <t_us>'");
                goto out;
            }
            /* Boundaries with no event since the last one add nothing. */
            if (t->nevents && (!t->nmarks || t->marks[t->nmarks - 1] < t->nevents)) {
                if (grow((void **)&t->marks, &cap_m, t->nmarks + 1, sizeof *t->marks)) {
                    load_fail(&ld, "out of memory");
                    goto out;
                }
                t->marks[t->nmarks++] = t->nevents;
            }
            continue;
        } else {
            char shown[20];
            load_fail(&ld, "unknown event '%s' (expected 'a', 'f' or 's')", printable(tok[0], shown));
            goto out;
        }
        size_t k = t->nevents;
        if (max_events && k >= max_events) {
            load_fail(&ld, "more than %zu events, the bound on a trace's length (each event "
                           "costs about %zu bytes of memory)",
                      max_events, sizeof *t->events + sizeof *t->t_us + sizeof *t->stream);
            rc = -2;
            goto out;
        }
        if (grow((void **)&t->events, &cap_ev, k + 1, sizeof *t->events) ||
            grow((void **)&t->t_us, &cap_t, k + 1, sizeof *t->t_us) ||
            grow((void **)&t->stream, &cap_s, k + 1, sizeof *t->stream)) {
            load_fail(&ld, "out of memory");
            goto out;
        }
        t->events[k] = ev;
        t->t_us[k] = ts;
        t->stream[k] = (uint32_t)stream;
        t->nevents++;
    }
    {
        int zerr;
        const char *msg = gz_message(gz, path, &zerr);
        if (zerr != Z_OK && zerr != Z_STREAM_END) {
            ld.line++;
            load_fail(&ld, "truncated or corrupt gzip data (%s)", msg);
            goto out;
        }
    }
    if (t->nevents == 0) {
        ld.line = 0;
        load_fail(&ld, "no events");
        goto out;
    }
    t->live_at_end = ids.count;
    if (t->nmarks && t->marks[t->nmarks - 1] >= t->nevents)
        t->nmarks--; /* a boundary after the last event marks nothing */
    rc = 0;
out:
    free(rd);
    gzclose(gz);
    id_map_fini(&ids);
    free(free_slots);
    free(slot_size);
    if (rc != 0)
        trace_free(t);
    return rc;
}

void trace_free(trace_t *t)
{
    free(t->path);
    free(t->events);
    free(t->t_us);
    free(t->stream);
    free(t->marks);
    memset(t, 0, sizeof *t);
}
