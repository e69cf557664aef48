/* libvmem statistics in the Prometheus text exposition format.
 *
 * Names follow Prometheus' conventions: the prefix vmem_, base units in the
 * name (_bytes, _seconds, _ratio), counters end in _total, one # HELP and one
 * # TYPE line per family, every sample of a family together.  Labels: device
 * (the CUDA ordinal) and job (which job's file).  See docs/kubernetes.md. */
#include "prom.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

enum metric_kind {
    M_NUMBER,     /* the key's number times scale */
    M_BOOL,       /* true 1, false 0 */
    M_CTL_ERROR,  /* controlFile: "error" 1, "ok" 0, "none" no sample */
    M_INFO,       /* constant 1 with backend and limit_source labels */
    M_FILE_OK     /* 1 if the file was read and parsed, else 0 */
};

/* One metric family: its name, type, help, where its value comes from. */
static const struct metric {
    const char *name, *type, *help, *key;
    enum metric_kind kind;
    double scale;
} metrics[] = {
    {"vmem_stats_file_ok", "gauge", "1 if the statistics file was read and parsed, 0 if not.",
     NULL, M_FILE_OK, 1},
    {"vmem_info", "gauge", "Constant 1; labels: the backend and where the initial limit came from.",
     NULL, M_INFO, 1},
    {"vmem_device_limit_bytes", "gauge", "Device memory limit in force.", "limit", M_NUMBER, 1},
    {"vmem_device_start_cap_bytes", "gauge", "Ceiling for raises of the device limit.",
     "startCap", M_NUMBER, 1},
    {"vmem_device_pending_limit_bytes", "gauge",
     "Target of a shrink waiting for frees (0 when none).", "pendingLimit", M_NUMBER, 1},
    {"vmem_device_shrink_pending", "gauge", "1 while a shrink waits for frees.", "shrinkPending",
     M_BOOL, 1},
    {"vmem_device_held_bytes", "gauge", "Device memory held from the backend.", "deviceHeld",
     M_NUMBER, 1},
    {"vmem_device_in_use_bytes", "gauge", "Device memory in live blocks (rounded).",
     "deviceInUse", M_NUMBER, 1},
    {"vmem_device_requested_bytes", "gauge", "Device memory requested by live blocks.",
     "deviceRequested", M_NUMBER, 1},
    {"vmem_device_peak_held_bytes", "gauge", "Highest device memory held since start.",
     "devicePeakHeld", M_NUMBER, 1},
    {"vmem_device_peak_in_use_bytes", "gauge", "Highest device memory in use since start.",
     "devicePeakInUse", M_NUMBER, 1},
    {"vmem_device_regions", "gauge", "Device regions held from the backend.", "deviceRegions",
     M_NUMBER, 1},
    {"vmem_device_stable_bytes", "gauge", "Device memory in use at the last step boundary.",
     "deviceMemStable", M_NUMBER, 1},
    {"vmem_step_device_in_use_max_bytes", "gauge", "Highest device memory in use during the last step.",
     "deviceMemUsedMax", M_NUMBER, 1},
    {"vmem_step_device_in_use_min_bytes", "gauge", "Lowest device memory in use during the last step.",
     "deviceMemUsedMin", M_NUMBER, 1},
    {"vmem_host_limit_bytes", "gauge", "Cap on the pinned host memory of the fallback.",
     "hostLimit", M_NUMBER, 1},
    {"vmem_host_held_bytes", "gauge", "Host memory held by the fallback.", "hostHeld", M_NUMBER,
     1},
    {"vmem_host_in_use_bytes", "gauge", "Host memory in live blocks.", "hostInUse", M_NUMBER, 1},
    {"vmem_host_peak_held_bytes", "gauge", "Highest host memory held since start.",
     "hostPeakHeld", M_NUMBER, 1},
    {"vmem_host_peak_in_use_bytes", "gauge", "Highest host memory in use since start.",
     "hostPeakInUse", M_NUMBER, 1},
    {"vmem_host_stable_bytes", "gauge", "Host memory in use at the last step boundary.",
     "hostMemStable", M_NUMBER, 1},
    {"vmem_step_host_in_use_max_bytes", "gauge", "Highest host memory in use during the last step.",
     "hostMemUsedMax", M_NUMBER, 1},
    {"vmem_step_host_in_use_min_bytes", "gauge", "Lowest host memory in use during the last step.",
     "hostMemUsedMin", M_NUMBER, 1},
    {"vmem_host_fallback_enabled", "gauge", "1 if allocations may spill to host memory.",
     "hostFallback", M_BOOL, 1},
    {"vmem_perf_ratio", "gauge", "GPU time share in force (1: no pacing, 0: suspended).", "perf",
     M_NUMBER, 0.01},
    {"vmem_step_duration_seconds", "gauge", "Duration of the last step.", "miniBatchDuration",
     M_NUMBER, 1e-6},
    {"vmem_fragmentation_ratio", "gauge", "Device memory held over device memory in use (0: none in use).",
     "fragmentation", M_NUMBER, 1},
    {"vmem_allocs_total", "counter", "Successful allocations.", "allocs", M_NUMBER, 1},
    {"vmem_frees_total", "counter", "Successful frees.", "frees", M_NUMBER, 1},
    {"vmem_spills_total", "counter", "Allocations served by the host fallback.", "spills",
     M_NUMBER, 1},
    {"vmem_spilled_bytes_total", "counter", "Bytes of allocations served by the host fallback.",
     "spilledBytes", M_NUMBER, 1},
    {"vmem_alloc_failures_total", "counter", "Allocations that failed.", "failures", M_NUMBER, 1},
    {"vmem_bad_frees_total", "counter", "Foreign or double frees rejected.", "badFrees", M_NUMBER,
     1},
    {"vmem_steps_total", "counter", "Steps ended (vmem_step_end calls).", "steps", M_NUMBER, 1},
    {"vmem_control_file_error", "gauge",
     "1 while the control file is missing or malformed (no sample without a control file).",
     "controlFile", M_CTL_ERROR, 1},
    {"vmem_control_pending", "gauge", "1 while a control change waits for the next step end.",
     "controlPending", M_BOOL, 1},
    {"vmem_control_errors_total", "counter", "Control file errors logged.", "controlErrors",
     M_NUMBER, 1},
    {"vmem_stats_timestamp_seconds", "gauge", "Unix time the statistics file was written.",
     "time", M_NUMBER, 1},
};

/* A growing text buffer; failed marks an allocation failure. */
typedef struct tbuf {
    char *s;
    size_t len, cap;
    int failed;
} tbuf_t;

static void tb_printf(tbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tb_printf(tbuf_t *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->failed = 1;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
}

/* A label value, escaped as the format asks: backslash, quote, newline. */
static void tb_label_value(tbuf_t *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\')
            tb_printf(b, "\\\\");
        else if (*v == '"')
            tb_printf(b, "\\\"");
        else if (*v == '\n')
            tb_printf(b, "\\n");
        else
            tb_printf(b, "%c", *v);
    }
}

/* The shortest decimal that reads back as d. */
static void tb_number(tbuf_t *b, double d)
{
    char buf[40];
    if (d == floor(d) && fabs(d) < 9007199254740992.0) { /* integers exactly, as integers */
        tb_printf(b, "%.0f", d);
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    tb_printf(b, "%s", buf);
}

/* The labels of one source: {device="..",job=".."[,extra]} or nothing. */
typedef struct labels {
    const char *device, *job;
    char device_buf[32];
} labels_t;

static void tb_labels(tbuf_t *b, const labels_t *l, const char *extra)
{
    if (!l->device && !l->job && !extra)
        return;
    const char *sep = "";
    tb_printf(b, "{");
    if (l->device) {
        tb_printf(b, "device=\"");
        tb_label_value(b, l->device);
        tb_printf(b, "\"");
        sep = ",";
    }
    if (l->job) {
        tb_printf(b, "%sjob=\"", sep);
        tb_label_value(b, l->job);
        tb_printf(b, "\"");
        sep = ",";
    }
    if (extra)
        tb_printf(b, "%s%s", sep, extra);
    tb_printf(b, "}");
}

/* Sample of metric m for one parsed source; 1 if it has one (value in *out). */
static int metric_value(const struct metric *m, const cJSON *root, double *out)
{
    if (m->kind == M_FILE_OK) {
        *out = root ? 1 : 0;
        return 1;
    }
    if (!root)
        return 0;
    if (m->kind == M_INFO) {
        *out = 1;
        return 1;
    }
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, m->key);
    switch (m->kind) {
    case M_NUMBER:
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
            return 0;
        *out = it->valuedouble * m->scale;
        return 1;
    case M_BOOL:
        if (!cJSON_IsBool(it))
            return 0;
        *out = cJSON_IsTrue(it) ? 1 : 0;
        return 1;
    case M_CTL_ERROR:
        if (!cJSON_IsString(it) || !strcmp(it->valuestring, "none"))
            return 0;
        *out = strcmp(it->valuestring, "ok") != 0;
        return 1;
    default:
        return 0;
    }
}

/* The info metric's own labels: backend="..",limit_source="..". */
static void info_labels(const cJSON *root, tbuf_t *extra)
{
    static const struct { const char *label, *key; } info[] = {
        {"backend", "backend"}, {"limit_source", "limitSource"}};
    const char *sep = "";
    for (size_t i = 0; i < sizeof info / sizeof info[0]; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, info[i].key);
        if (!cJSON_IsString(it))
            continue;
        tb_printf(extra, "%s%s=\"", sep, info[i].label);
        tb_label_value(extra, it->valuestring);
        tb_printf(extra, "\"");
        sep = ",";
    }
}

char *prom_render(const prom_source_t *src, size_t n, char *err, size_t errlen)
{
    cJSON **roots = calloc(n ? n : 1, sizeof *roots);
    labels_t *labels = calloc(n ? n : 1, sizeof *labels);
    tbuf_t b = {0};
    char *out = NULL;
    if (!roots || !labels) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        labels[i].job = src[i].job;
        labels[i].device = src[i].device;
        if (!src[i].json)
            continue;
        roots[i] = cJSON_Parse(src[i].json);
        if (!roots[i] || !cJSON_IsObject(roots[i])) {
            snprintf(err, errlen, "source %zu%s%s%s: not a libvmem statistics file (not a JSON object)",
                     i + 1, src[i].job ? " (job " : "", src[i].job ? src[i].job : "",
                     src[i].job ? ")" : "");
            goto done;
        }
        const cJSON *dev = cJSON_GetObjectItemCaseSensitive(roots[i], "device");
        if (!labels[i].device && cJSON_IsNumber(dev)) {
            snprintf(labels[i].device_buf, sizeof labels[i].device_buf, "%.0f", dev->valuedouble);
            labels[i].device = labels[i].device_buf;
        }
    }
    for (size_t m = 0; m < sizeof metrics / sizeof metrics[0]; m++) {
        const struct metric *mt = &metrics[m];
        int header = 0;
        for (size_t i = 0; i < n; i++) {
            double v;
            if (!metric_value(mt, roots[i], &v))
                continue;
            if (!header) {
                tb_printf(&b, "# HELP %s %s\n# TYPE %s %s\n", mt->name, mt->help, mt->name,
                          mt->type);
                header = 1;
            }
            tb_printf(&b, "%s", mt->name);
            if (mt->kind == M_INFO) {
                tbuf_t extra = {0};
                info_labels(roots[i], &extra);
                if (extra.failed)
                    b.failed = 1;
                tb_labels(&b, &labels[i], extra.len ? extra.s : NULL);
                free(extra.s);
            } else {
                tb_labels(&b, &labels[i], NULL);
            }
            tb_printf(&b, " ");
            tb_number(&b, v);
            tb_printf(&b, "\n");
        }
    }
    if (!b.s) /* nothing to say: still a valid, empty exposition */
        tb_printf(&b, "%s", "");
    if (b.failed) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    out = b.s;
    b.s = NULL;
done:
    free(b.s);
    for (size_t i = 0; roots && i < n; i++)
        cJSON_Delete(roots[i]);
    free(roots);
    free(labels);
    return out;
}

int prom_write_file(const char *path, const char *text, char *err, size_t errlen)
{
    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    if (!tmp) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(tmp, tl, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    size_t len = strlen(text);
    int ok = f && fwrite(text, 1, len, f) == len;
    if (f && fclose(f) != 0)
        ok = 0;
    if (ok && rename(tmp, path) != 0)
        ok = 0;
    int e = errno;
    if (!ok) {
        unlink(tmp);
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(e));
    }
    free(tmp);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------------------ */
/* vmemctl stats --prometheus                                               */
/* ------------------------------------------------------------------------ */

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 8192, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
        if (n + 1 == cap) {
            if (cap >= ((size_t)1 << 24))
                break;
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (buf && bad) {
        free(buf);
        return NULL;
    }
    if (buf)
        buf[n] = '\0';
    return buf;
}

/* The default job label: the file's name without its directory and without
 * a ".json" ending ("/shared/stats/hp.json" -> "hp"). */
static char *job_from_path(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".json"))
        n -= 5;
    return strndup(base, n);
}

static int cli_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "vmemctl: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nusage: vmemctl stats --prometheus [--job NAME] [--device LABEL] "
                    "[--output FILE.prom] STATS_FILE...\n");
    return 2;
}

int prom_cli(int argc, char **argv)
{
    const char *job = NULL, *device = NULL, *output = NULL;
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    int nfiles = 0;
    if (!files)
        return 1;
    int rc = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--prometheus"))
            continue;
        const char **slot = !strcmp(a, "--job") ? &job : !strcmp(a, "--device") ? &device
                          : !strcmp(a, "--output") ? &output : NULL;
        if (slot) {
            if (i + 1 >= argc || !*argv[i + 1]) {
                rc = cli_usage("%s needs a value", a);
                goto out;
            }
            *slot = argv[++i];
        } else if (a[0] == '-' && a[1] == '-') {
            rc = cli_usage("unknown option \"%s\" for stats --prometheus", a);
            goto out;
        } else {
            files[nfiles++] = a;
        }
    }
    if (nfiles == 0) {
        rc = cli_usage("%s", "stats --prometheus needs STATS_FILE");
        goto out;
    }
    if (job && nfiles > 1) {
        rc = cli_usage("%s", "--job names one file's job; with several files each job is its "
                             "file's name");
        goto out;
    }
    if (output) {
        size_t n = strlen(output);
        if (n < 5 || strcmp(output + n - 5, ".prom"))
            fprintf(stderr, "vmemctl: warning: %s does not end in .prom: node-exporter's textfile "
                            "collector reads only *.prom files\n", output);
    }
    prom_source_t *src = calloc((size_t)nfiles, sizeof *src);
    char **texts = calloc((size_t)nfiles, sizeof *texts);
    char **jobs = calloc((size_t)nfiles, sizeof *jobs);
    if (!src || !texts || !jobs) {
        free(src);
        free(texts);
        free(jobs);
        rc = 1;
        goto out;
    }
    for (int i = 0; i < nfiles; i++) {
        texts[i] = slurp(files[i]);
        if (!texts[i]) {
            fprintf(stderr, "vmemctl: %s: cannot read: %s\n", files[i], strerror(errno));
            rc = 1;
        }
        jobs[i] = job ? strdup(job) : job_from_path(files[i]);
        src[i] = (prom_source_t){texts[i], jobs[i], device};
    }
    char err[256];
    char *text = prom_render(src, (size_t)nfiles, err, sizeof err);
    if (!text) {
        /* name the file, not the index */
        for (int i = 0; i < nfiles; i++) {
            prom_source_t one = src[i];
            char e2[256];
            char *t = texts[i] ? prom_render(&one, 1, e2, sizeof e2) : NULL;
            if (texts[i] && !t) {
                fprintf(stderr, "vmemctl: %s: not a libvmem statistics file (not a JSON object)\n",
                        files[i]);
                free(texts[i]);
                texts[i] = NULL;
                src[i].json = NULL;
            }
            free(t);
        }
        rc = 1;
        text = prom_render(src, (size_t)nfiles, err, sizeof err);
    }
    if (!text) {
        fprintf(stderr, "vmemctl: %s\n", err);
        rc = 1;
    } else if (output) {
        if (prom_write_file(output, text, err, sizeof err) != 0) {
            fprintf(stderr, "vmemctl: %s\n", err);
            rc = 1;
        }
    } else {
        fputs(text, stdout);
        fflush(stdout);
    }
    free(text);
    for (int i = 0; i < nfiles; i++) {
        free(texts[i]);
        free(jobs[i]);
    }
    free(src);
    free(texts);
    free(jobs);
out:
    free(files);
    return rc;
}
