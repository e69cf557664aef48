/* Suite 'control': the statistics file written at each vmem_step_end —
 * every key present, never seen half written, no temporary files left,
 * one error (not one per step) when it cannot be written. */
#include <cjson/cJSON.h>

#include "common.h"

/* AntMan's keys (DESIGN.md, semantics 7) and libvmem's own. */
static const char *const keys[] = {
    "deviceMemUsedMax", "deviceMemUsedMin", "deviceMemPoolSize", "deviceMemStable",
    "hostMemUsedMax",   "hostMemUsedMin",   "hostMemPoolSize",   "swapReason",
    "miniBatchDuration",
    "version", "backend", "limit", "pendingLimit", "startCap", "deviceHeld", "deviceInUse",
    "deviceRequested", "devicePeakHeld", "devicePeakInUse", "deviceRegions", "hostLimit",
    "hostHeld", "hostInUse", "hostPeakHeld", "hostPeakInUse", "hostFallback", "perf", "allocs",
    "frees", "spills", "spilledBytes", "failures", "badFrees", "steps", "fragmentation", "pid",
    "time", "controlFile", "controlPending", "controlErrors",
};

static char *slurp(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return NULL;
    size_t cap = 8192, n = 0;
    char *buf = malloc(cap);
    ssize_t r;
    while ((r = read(fd, buf + n, cap - n - 1)) > 0) {
        n += (size_t)r;
        if (n + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    close(fd);
    buf[n] = '\0';
    *len = n;
    return buf;
}

static double num(const cJSON *root, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    cr_assert(cJSON_IsNumber(it), "key %s is not a number", key);
    return it->valuedouble;
}

Test(control_stats, file_has_every_key_and_the_right_values, .timeout = 30)
{
    char *dir = dir_make();
    char *stats = path_join(dir, "stats.json");
    vmem_t *v = instance_make(64 * MiB, NULL, stats, NULL, 0);
    void *a = vmem_alloc(v, 40 * MiB);
    void *b = vmem_alloc(v, 40 * MiB); /* spills: 80 MiB > 64 MiB */
    cr_assert(a && b);
    sleep_ms(10);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);

    size_t len;
    char *text = slurp(stats, &len);
    cr_assert_not_null(text, "no statistics file after a step end");
    cr_assert(len > 0 && text[len - 1] == '\n');
    cJSON *root = cJSON_Parse(text);
    cr_assert_not_null(root, "statistics file is not JSON: %s", text);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(root, keys[i]), "missing key %s",
                           keys[i]);
    cr_assert_eq(num(root, "limit"), 64.0 * MiB);
    cr_assert_eq(num(root, "steps"), 1);
    cr_assert_eq(num(root, "spills"), 1);
    cr_assert_eq(num(root, "failures"), 0);
    cr_assert_eq(num(root, "deviceInUse"), 40.0 * MiB);
    cr_assert_eq(num(root, "hostInUse"), 40.0 * MiB);
    cr_assert_eq(num(root, "deviceMemUsedMax"), 40.0 * MiB);
    cr_assert_eq(num(root, "hostMemUsedMax"), 40.0 * MiB);
    cr_assert_geq(num(root, "miniBatchDuration"), 10000, "step lasted at least 10 ms");
    cr_assert_eq(num(root, "pid"), (double)getpid());
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(root, "swapReason")->valuestring, "limit");
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(root, "controlFile")->valuestring, "none");
    cJSON_Delete(root);
    free(text);
    vmem_free(v, a);
    vmem_free(v, b);
    vmem_destroy(v);
    free(stats);
    dir_remove(dir);
}

typedef struct reader {
    const char *path;
    atomic_int stop;
    atomic_long reads, bad, missing;
    char bad_text[256];
} reader_t;

/* Reads and parses the file in a loop, as a scheduler polling it would. */
static void *reader_main(void *arg)
{
    reader_t *r = arg;
    while (!atomic_load(&r->stop)) {
        size_t len;
        char *text = slurp(r->path, &len);
        if (!text) {
            atomic_fetch_add(&r->missing, 1);
            continue;
        }
        cJSON *root = cJSON_Parse(text);
        int ok = root && cJSON_IsObject(root);
        for (size_t i = 0; ok && i < sizeof keys / sizeof keys[0]; i++)
            ok = cJSON_GetObjectItemCaseSensitive(root, keys[i]) != NULL;
        if (!ok && atomic_fetch_add(&r->bad, 1) == 0)
            snprintf(r->bad_text, sizeof r->bad_text, "%s", text);
        atomic_fetch_add(&r->reads, 1);
        cJSON_Delete(root);
        free(text);
    }
    return NULL;
}

Test(control_stats, never_seen_half_written, .timeout = 60)
{
    char *dir = dir_make();
    char *stats = path_join(dir, "stats.json");
    vmem_t *v = instance_make(256 * MiB, NULL, stats, NULL, 0);
    cr_assert_eq(vmem_step_end(v), VMEM_OK); /* the file exists before the reader starts */
    reader_t r = {.path = stats};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, reader_main, &r), 0);
    /* steps until the reader has read the file many times while it was
     * being replaced, whatever the machine's speed */
    long steps = 0;
    double end = now_s() + 30;
    void *live[8] = {0};
    while ((atomic_load(&r.reads) < 2000 || steps < 2000) && now_s() < end) {
        int i = (int)(steps % 8);
        if (live[i])
            vmem_free(v, live[i]);
        live[i] = vmem_alloc(v, (size_t)(1 + steps % 13) * MiB);
        cr_assert_eq(vmem_step_end(v), VMEM_OK);
        steps++;
    }
    atomic_store(&r.stop, 1);
    pthread_join(t, NULL);
    cr_assert_geq(atomic_load(&r.reads), 2000, "the reader did not get to read enough");
    cr_assert_eq(atomic_load(&r.bad), 0, "%ld of %ld reads saw a broken file, e.g.: %s",
                 atomic_load(&r.bad), atomic_load(&r.reads), r.bad_text);
    cr_assert_eq(atomic_load(&r.missing), 0, "the file vanished between writes");
    for (int i = 0; i < 8; i++)
        vmem_free(v, live[i]);
    vmem_destroy(v);

    /* no temporary files are left behind */
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        cr_assert_str_eq(e->d_name, "stats.json", "stray file %s", e->d_name);
        n++;
    }
    closedir(d);
    cr_assert_eq(n, 1);
    free(stats);
    dir_remove(dir);
}

Test(control_stats, unwritable_file_logs_one_error_per_failing_run, .timeout = 30)
{
    char *dir = dir_make();
    char *sub = path_join(dir, "not-yet");
    char *stats = path_join(sub, "stats.json");
    logcount_t lc;
    logcount_init(&lc);
    vmem_t *v = instance_make(256 * MiB, NULL, stats, &lc, 0);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(vmem_step_end(v), VMEM_ERR_IO);
    cr_assert_eq(atomic_load(&lc.errors), 1, "one error for five failed writes:\n%s", lc.all);
    cr_assert_eq(mkdir(sub, 0755), 0);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    cr_assert_eq(access(stats, F_OK), 0);
    vmem_destroy(v);
    unlink(stats);
    rmdir(sub);
    free(stats);
    free(sub);
    dir_remove(dir);
}

Test(control_stats, control_state_is_reported, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    char *stats = path_join(dir, "stats.json");
    file_put_atomic(ctl, "{\"limit\": \"128M\"}");
    vmem_t *v = instance_make(256 * MiB, ctl, stats, NULL, 0);
    file_put_atomic(ctl, "{\"limit\": \"64M\"}");
    cr_assert(wait_file_limit(v, 64 * MiB));
    char buf[4096];
    cr_assert_eq(vmem_stats_json(v, buf, sizeof buf, NULL), VMEM_OK);
    cJSON *root = cJSON_Parse(buf);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(root, "controlFile")->valuestring, "ok");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "controlPending")));
    cr_assert_eq(num(root, "limit"), 128.0 * MiB);
    cJSON_Delete(root);

    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    size_t len;
    char *text = slurp(stats, &len);
    root = cJSON_Parse(text);
    cr_assert_eq(num(root, "limit"), 64.0 * MiB, "the file written at the step end shows the "
                                                 "limit applied at that step end");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(root, "controlPending")));
    cJSON_Delete(root);
    free(text);

    file_put_atomic(ctl, "{oops");
    /* The error state and its count are published together, once the
     * line is logged (control.c, state_bad). */
    cr_assert(WAIT_FOR(status_of(v).in_error));
    cr_assert_eq(status_of(v).errors, 1);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    text = slurp(stats, &len);
    root = cJSON_Parse(text);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(root, "controlFile")->valuestring, "error");
    cr_assert_eq(num(root, "controlErrors"), 1, "controlErrors %g", num(root, "controlErrors"));
    cJSON_Delete(root);
    free(text);
    vmem_destroy(v);
    free(ctl);
    free(stats);
    dir_remove(dir);
}
