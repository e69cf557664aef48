/* Suite 'control_prom': the statistics in Prometheus text format
 * (tools/prom.c) and `vmemctl stats --prometheus`.  Every rendering is
 * checked against the text format's grammar and Prometheus' naming rules by
 * prom_valid() below, then for its values against the instance's own
 * statistics. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <sys/wait.h>

#include "common.h"
#include "prom.h"

/* ------------------------------------------------------------------------ */
/* The text format, checked                                                 */
/* ------------------------------------------------------------------------ */

static const char *name_end(const char *p)
{
    if (!(isalpha((unsigned char)*p) || *p == '_' || *p == ':'))
        return NULL;
    while (isalnum((unsigned char)*p) || *p == '_' || *p == ':')
        p++;
    return p;
}

static int ends_with(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && !strncmp(s + n - k, suffix, k);
}

/* Asserts that text is a valid exposition: each line a HELP, TYPE or
 * sample; one HELP and one TYPE per family, before its samples; a family's
 * samples together; gauge or counter only; counters end in _total; no
 * sample (name and labels) twice; label values escaped.  Returns the number
 * of samples. */
static int prom_valid(const char *text)
{
    char seen_types[128][80];
    int ntypes = 0;
    char current[80] = "";
    char samples[512][256];
    int nsamples = 0;
    const char *line = text;
    cr_assert(!*text || text[strlen(text) - 1] == '\n', "the text must end with a newline");
    while (*line) {
        const char *eol = strchr(line, '\n');
        cr_assert_not_null(eol);
        size_t len = (size_t)(eol - line);
        char l[1024];
        cr_assert_lt(len, sizeof l);
        memcpy(l, line, len);
        l[len] = '\0';
        if (!strncmp(l, "# HELP ", 7) || !strncmp(l, "# TYPE ", 7)) {
            const char *n = l + 7, *e = name_end(n);
            cr_assert(e && *e == ' ', "bad metric name in \"%s\"", l);
            char name[80];
            snprintf(name, sizeof name, "%.*s", (int)(e - n), n);
            if (l[2] == 'T') {
                cr_assert(!strcmp(e + 1, "gauge") || !strcmp(e + 1, "counter"), "type in \"%s\"", l);
                for (int i = 0; i < ntypes; i++)
                    cr_assert(strcmp(seen_types[i], name), "family %s twice", name);
                cr_assert(!strcmp(current, name), "TYPE of %s without its HELP first", name);
                snprintf(seen_types[ntypes++], sizeof seen_types[0], "%s", name);
                if (!strcmp(e + 1, "counter"))
                    cr_assert(ends_with(name, strlen(name), "_total"), "counter %s", name);
                else
                    cr_assert_not(ends_with(name, strlen(name), "_total"), "gauge %s", name);
            } else {
                cr_assert(strlen(e + 1) > 0, "empty HELP for %s", name);
                snprintf(current, sizeof current, "%s", name);
            }
        } else {
            cr_assert_neq(l[0], '#', "unknown comment line \"%s\"", l);
            const char *e = name_end(l);
            cr_assert_not_null(e, "bad sample line \"%s\"", l);
            cr_assert(ntypes > 0 && (size_t)(e - l) == strlen(seen_types[ntypes - 1]) &&
                          !strncmp(l, seen_types[ntypes - 1], (size_t)(e - l)),
                      "sample \"%s\" outside its family's block", l);
            const char *p = e;
            if (*p == '{') {
                p++;
                while (*p != '}') {
                    const char *ln = p;
                    cr_assert(isalpha((unsigned char)*p) || *p == '_', "label name in \"%s\"", l);
                    while (isalnum((unsigned char)*p) || *p == '_')
                        p++;
                    cr_assert(p > ln && p[0] == '=' && p[1] == '"', "label in \"%s\"", l);
                    p += 2;
                    while (*p != '"') {
                        cr_assert(*p && *p != '\n', "unterminated label value in \"%s\"", l);
                        if (*p == '\\') {
                            cr_assert(p[1] == '\\' || p[1] == '"' || p[1] == 'n',
                                      "bad escape in \"%s\"", l);
                            p++;
                        }
                        p++;
                    }
                    p++;
                    if (*p == ',')
                        p++;
                    else
                        cr_assert_eq(*p, '}', "after a label in \"%s\"", l);
                }
                p++;
            }
            cr_assert_eq(*p, ' ', "no space before the value in \"%s\"", l);
            char *end;
            double v = strtod(p + 1, &end);
            cr_assert(end != p + 1 && *end == '\0' && isfinite(v), "bad value in \"%s\"", l);
            for (int i = 0; i < nsamples; i++)
                cr_assert(strncmp(samples[i], l, (size_t)(p - l)) || samples[i][p - l] != '\0',
                          "sample twice: \"%s\"", l);
            cr_assert_lt(nsamples, 512);
            snprintf(samples[nsamples++], sizeof samples[0], "%.*s", (int)(p - l), l);
        }
        line = eol + 1;
    }
    return nsamples;
}

/* The value of the sample whose name and labels are exactly key; NAN if none. */
static double sample(const char *text, const char *key)
{
    size_t k = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, key, k) && p[k] == ' ')
            return strtod(p + k + 1, NULL);
    return NAN;
}

/* ------------------------------------------------------------------------ */
/* Sources                                                                  */
/* ------------------------------------------------------------------------ */

static vmem_t *sim_instance(int device, size_t limit)
{
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = VMEM_BACKEND_SIM;
    cfg.sim_capacity = 8 * GiB;
    cfg.device = device;
    cfg.limit = limit;
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_OK);
    return v;
}

static char *json_of(vmem_t *v)
{
    static char buf[2][4096];
    static int i;
    char *b = buf[i++ & 1];
    cr_assert_eq(vmem_stats_json(v, b, sizeof buf[0], NULL), VMEM_OK);
    return b;
}

static double json_num(const char *json, const char *key)
{
    cJSON *root = cJSON_Parse(json);
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    cr_assert(cJSON_IsNumber(it), "%s missing", key);
    double d = it->valuedouble;
    cJSON_Delete(root);
    return d;
}

Test(control_prom, instance_statistics_render_valid_text_with_the_right_values)
{
    vmem_t *v = sim_instance(0, 1 * GiB);
    void *a = vmem_alloc(v, 300 * MiB), *b = vmem_alloc(v, 900 * MiB); /* b spills */
    cr_assert(a && b);
    sleep_ms(5);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    vmem_stats_t s = {.size = sizeof s};
    cr_assert_eq(vmem_get_stats(v, &s), VMEM_OK);
    const char *json = json_of(v);
    prom_source_t src = {json, "hp", NULL};
    char err[256];
    char *text = prom_render(&src, 1, err, sizeof err);
    cr_assert_not_null(text, "%s", err);
    cr_assert_gt(prom_valid(text), 30);
#define L "{device=\"0\",job=\"hp\"}"
    cr_assert_eq(sample(text, "vmem_device_limit_bytes" L), (double)(1 * GiB));
    cr_assert_eq(sample(text, "vmem_device_start_cap_bytes" L), (double)(1 * GiB));
    cr_assert_eq(sample(text, "vmem_device_in_use_bytes" L), (double)s.device_in_use);
    cr_assert_eq(sample(text, "vmem_device_held_bytes" L), (double)s.device_held);
    cr_assert_eq(sample(text, "vmem_host_in_use_bytes" L), (double)s.host_in_use);
    cr_assert_gt(s.host_in_use, 0);
    cr_assert_eq(sample(text, "vmem_spills_total" L), (double)s.spills);
    cr_assert_eq(sample(text, "vmem_spilled_bytes_total" L), (double)s.spilled_bytes);
    cr_assert_eq(sample(text, "vmem_allocs_total" L), 2);
    cr_assert_eq(sample(text, "vmem_steps_total" L), 1);
    cr_assert_eq(sample(text, "vmem_perf_ratio" L), 1);
    cr_assert_eq(sample(text, "vmem_host_fallback_enabled" L), 1);
    cr_assert_eq(sample(text, "vmem_stats_file_ok" L), 1);
    double us = json_num(json, "miniBatchDuration");
    cr_assert_gt(us, 0);
    cr_assert_float_eq(sample(text, "vmem_step_duration_seconds" L), us * 1e-6, 1e-12);
    cr_assert_eq(sample(text, "vmem_stats_timestamp_seconds" L), json_num(json, "time"));
    cr_assert_eq(sample(text, "vmem_info{device=\"0\",job=\"hp\",backend=\"sim\","
                              "limit_source=\"config\"}"),
                 1);
    /* no control file: no sample of its state */
    cr_assert(isnan(sample(text, "vmem_control_file_error" L)));
#undef L
    free(text);
    vmem_free(v, a);
    vmem_free(v, b);
    vmem_destroy(v);
}

Test(control_prom, two_jobs_share_each_family)
{
    vmem_t *hp = sim_instance(0, 2 * GiB), *opp = sim_instance(1, 1 * GiB);
    prom_source_t src[2] = {{json_of(hp), "hp", NULL}, {json_of(opp), "opp", NULL}};
    char err[256];
    char *text = prom_render(src, 2, err, sizeof err);
    cr_assert_not_null(text, "%s", err);
    prom_valid(text); /* each family once, its samples together */
    cr_assert_eq(sample(text, "vmem_device_limit_bytes{device=\"0\",job=\"hp\"}"), (double)(2 * GiB));
    cr_assert_eq(sample(text, "vmem_device_limit_bytes{device=\"1\",job=\"opp\"}"),
                 (double)(1 * GiB));
    /* --device overrides the file's ordinal */
    src[1].device = "GPU-7a3e";
    free(text);
    text = prom_render(src, 2, err, sizeof err);
    cr_assert_eq(sample(text, "vmem_device_limit_bytes{device=\"GPU-7a3e\",job=\"opp\"}"),
                 (double)(1 * GiB));
    free(text);
    vmem_destroy(hp);
    vmem_destroy(opp);
}

Test(control_prom, label_values_are_escaped)
{
    prom_source_t src = {"{\"limit\": 5}", "a\"b\\c\nd", NULL};
    char err[256];
    char *text = prom_render(&src, 1, err, sizeof err);
    cr_assert_not_null(text, "%s", err);
    prom_valid(text);
    cr_assert_eq(sample(text, "vmem_device_limit_bytes{job=\"a\\\"b\\\\c\\nd\"}"), 5, "%s", text);
    free(text);
}

Test(control_prom, missing_keys_are_left_out_and_malformed_sources_refused)
{
    prom_source_t src = {"{\"limit\": 5, \"device\": 2, \"hostFallback\": \"yes\"}", NULL, NULL};
    char err[256];
    char *text = prom_render(&src, 1, err, sizeof err);
    cr_assert_not_null(text, "%s", err);
    prom_valid(text);
    cr_assert_eq(sample(text, "vmem_device_limit_bytes{device=\"2\"}"), 5);
    cr_assert_null(strstr(text, "vmem_device_held_bytes"), "a key the file lacks: %s", text);
    cr_assert_null(strstr(text, "vmem_host_fallback_enabled"), "not a boolean: %s", text);
    free(text);

    static const char *bad[] = {"not json", "[1,2]", "{\"limit\": 5", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        prom_source_t b = {bad[i], "x", NULL};
        err[0] = '\0';
        cr_expect_null(prom_render(&b, 1, err, sizeof err), "\"%s\" rendered", bad[i]);
        cr_expect(strstr(err, "not a libvmem statistics file") != NULL, "%s", err);
    }
    /* an unreadable file (json NULL) only says so */
    prom_source_t gone = {NULL, "gone", NULL};
    text = prom_render(&gone, 1, err, sizeof err);
    cr_assert_not_null(text);
    cr_assert_eq(prom_valid(text), 1, "%s", text);
    cr_assert_eq(sample(text, "vmem_stats_file_ok{job=\"gone\"}"), 0);
    free(text);
}

/* ------------------------------------------------------------------------ */
/* vmemctl stats --prometheus                                               */
/* ------------------------------------------------------------------------ */

/* VMEMCTL_EXE (meson test), else next to this test in the build tree
 * (BUILD/tests/control/ -> BUILD/tools/), as when the GPU runner starts it. */
static const char *vmemctl(void)
{
    const char *p = getenv("VMEMCTL_EXE");
    if (p && *p)
        return p;
    static char path[4096];
    char self[3072];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    cr_assert(n > 0, "VMEMCTL_EXE is not set and /proc/self/exe is unreadable");
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    snprintf(path, sizeof path, "%s/../../tools/vmemctl", self);
    cr_assert_eq(access(path, X_OK), 0, "VMEMCTL_EXE not set and %s not found", path);
    return path;
}

typedef cmd_run_t run_t;

static void run(run_t *r, const char *const argv[]) { cmd_run(r, argv); }

static int dir_has_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    int found = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp"))
            found = 1;
    if (d)
        closedir(d);
    return found;
}

Test(control_prom, vmemctl_prints_and_writes_the_textfile, .timeout = 30)
{
    char *dir = dir_make();
    char *hp = path_join(dir, "hp.json"), *opp = path_join(dir, "opp.json");
    vmem_t *v = instance_make(1 * GiB, NULL, hp, NULL, 0);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    vmem_destroy(v);
    v = instance_make(512 * MiB, NULL, opp, NULL, 0);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    vmem_destroy(v);

    static run_t r, w;
    run(&r, (const char *const[]){vmemctl(), "stats", "--prometheus", hp, opp, NULL});
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    prom_valid(r.out);
    /* the job label defaults to the file's name without .json */
    cr_assert_eq(sample(r.out, "vmem_device_limit_bytes{device=\"0\",job=\"hp\"}"), (double)GiB);
    cr_assert_eq(sample(r.out, "vmem_device_limit_bytes{device=\"0\",job=\"opp\"}"),
                 (double)(512 * MiB));

    char *prom = path_join(dir, "vmem.prom");
    run(&w, (const char *const[]){vmemctl(), "stats", "--prometheus", "--output", prom, hp, opp,
                                  NULL});
    cr_assert_eq(w.status, 0, "stderr: %s", w.err);
    cr_assert_str_empty(w.out, "--output prints nothing");
    static char written[65536];
    cmd_slurp(prom, written, sizeof written);
    cr_assert_str_eq(written, r.out, "the textfile differs from what stats --prometheus prints");
    cr_assert_not(dir_has_tmp(dir), "a temporary file was left behind");

    /* --job for one file */
    run(&r, (const char *const[]){vmemctl(), "stats", "--prometheus", "--job", "trainer", hp, NULL});
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_eq(sample(r.out, "vmem_device_limit_bytes{device=\"0\",job=\"trainer\"}"),
                 (double)GiB);

    /* one file missing: exit 1, the other still rendered, the missing one said so */
    char *gone = path_join(dir, "gone.json");
    run(&w, (const char *const[]){vmemctl(), "stats", "--prometheus", "--output", prom, hp, gone,
                                  NULL});
    cr_assert_eq(w.status, 1);
    cr_assert(strstr(w.err, "gone.json") != NULL, "stderr: %s", w.err);
    cmd_slurp(prom, written, sizeof written);
    prom_valid(written);
    cr_assert_eq(sample(written, "vmem_stats_file_ok{job=\"gone\"}"), 0, "%s", written);
    cr_assert_eq(sample(written, "vmem_stats_file_ok{device=\"0\",job=\"hp\"}"), 1);

    /* an output that cannot be written */
    run(&w, (const char *const[]){vmemctl(), "stats", "--prometheus", "--output",
                                  "/nonexistent-dir/x.prom", hp, NULL});
    cr_assert_eq(w.status, 1);
    cr_assert(strstr(w.err, "cannot write") != NULL, "stderr: %s", w.err);

    unlink(hp);
    unlink(opp);
    unlink(prom);
    free(hp);
    free(opp);
    free(prom);
    free(gone);
    dir_remove(dir);
}

Test(control_prom, vmemctl_bad_arguments_exit_2, .timeout = 30)
{
    static const char *const cases[][6] = {
        {"stats", "--prometheus", NULL},
        {"stats", "--prometheus", "--job", "x", "a.json", "b.json"},
        {"stats", "--prometheus", "--bogus", "a.json", NULL},
        {"stats", "--prometheus", "a.json", "--output", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[8] = {vmemctl()};
        for (int k = 0; k < 6 && cases[i][k]; k++)
            argv[k + 1] = cases[i][k];
        static run_t r;
        run(&r, argv);
        cr_expect_eq(r.status, 2, "case %zu: exit %d, stderr %s", i, r.status, r.err);
        cr_expect(strstr(r.err, "usage") != NULL, "case %zu: no usage: %s", i, r.err);
    }
}
