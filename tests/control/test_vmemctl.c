/* Suite 'control': vmemctl end to end — the control file it writes, the
 * statistics it shows, its exit codes — and a process (vmem-control-demo)
 * following `vmemctl set-limit`.  The executables' paths come from the
 * environment (VMEMCTL_EXE, CONTROL_DEMO_EXE; set by meson) or sit next to
 * this test in the build tree. */
#include <cjson/cJSON.h>
#include <signal.h>
#include <sys/wait.h>

#include "common.h"

/* The path of a tool: from the environment (meson test), else next to this
 * test in the build tree (BUILD/tests/control/ -> BUILD/tools/), as when the
 * GPU runner starts the binaries directly. */
static const char *exe(const char *var)
{
    const char *p = getenv(var);
    if (p && *p)
        return p;
    static char path[2][4096];
    int i = strcmp(var, "VMEMCTL_EXE") != 0;
    if (!path[i][0]) {
        char self[3072];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        cr_assert(n > 0, "%s is not set and /proc/self/exe is unreadable", var);
        self[n] = '\0';
        *strrchr(self, '/') = '\0';
        snprintf(path[i], sizeof path[i], "%s/../../tools/%s", self,
                 i ? "vmem-control-demo" : "vmemctl");
    }
    cr_assert_eq(access(path[i], X_OK), 0, "%s not set and %s not found", var, path[i]);
    return path[i];
}

typedef cmd_run_t run_t;

static void run(run_t *r, const char *const argv[]) { cmd_run(r, argv); }

static cJSON *json_load(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    cJSON *root = cJSON_Parse(buf);
    cr_assert_not_null(root, "%s is not JSON: %s", path, buf);
    return root;
}

static double json_num(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    cr_assert(cJSON_IsNumber(it), "\"%s\" missing or not a number", key);
    return it->valuedouble;
}

Test(control_vmemctl, set_limit_creates_the_file, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    run_t r;
    run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set-limit", ctl, "8G", NULL});
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert(strstr(r.out, "8589934592") != NULL, "%s", r.out);
    cJSON *root = json_load(ctl);
    cr_assert_eq(json_num(root, "limit"), 8589934592.0);
    cJSON_Delete(root);
    struct stat st;
    cr_assert_eq(stat(ctl, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0644);
    free(ctl);
    dir_remove(dir);
}

Test(control_vmemctl, set_keeps_the_other_keys, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    file_put_atomic(ctl, "{\"perf\": 80, \"custom\": \"kept\", \"limit\": 1, \"mem_limit\": 2,"
                         " \"0000:3b:00.0\": {\"mem_limit\": 1048576}}");
    run_t r;
    run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set-limit", ctl, "512M", NULL});
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set", ctl, "host_limit", "2G", NULL});
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set", ctl, "host_fallback", "false", NULL});
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set", ctl, "perf", "40", NULL});
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set-limit", "--gpu", "sim:0", ctl, "256M",
                                  NULL});
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);

    cJSON *root = json_load(ctl);
    cr_assert_eq(json_num(root, "limit"), 512.0 * MiB);
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(root, "mem_limit"), "synonym left behind");
    cr_assert_eq(json_num(root, "host_limit"), 2.0 * GiB);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(root, "host_fallback")));
    cr_assert_eq(json_num(root, "perf"), 40);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(root, "custom")->valuestring, "kept");
    cr_assert_eq(json_num(cJSON_GetObjectItemCaseSensitive(root, "0000:3b:00.0"), "mem_limit"),
                 1048576);
    cr_assert_eq(json_num(cJSON_GetObjectItemCaseSensitive(root, "sim:0"), "mem_limit"),
                 256.0 * MiB);
    cJSON_Delete(root);

    /* and libvmem reads what vmemctl wrote: the sim:0 entry wins */
    vmem_t *v = instance_make(1 * GiB, ctl, NULL, NULL, 0);
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    cr_assert_eq(s.limit, 256 * MiB);
    cr_assert_eq(s.host_limit, 2 * GiB);
    cr_assert_eq(s.host_fallback, 0);
    cr_assert_eq(s.perf, 40);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

Test(control_vmemctl, malformed_control_file_is_left_alone, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    file_put_atomic(ctl, "{\"limit\": oops");
    run_t r;
    run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set-limit", ctl, "1G", NULL});
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "not a JSON object") != NULL, "%s", r.err);
    char buf[64];
    cmd_slurp(ctl, buf, sizeof buf);
    cr_assert_str_eq(buf, "{\"limit\": oops");
    free(ctl);
    dir_remove(dir);
}

Test(control_vmemctl, bad_arguments_exit_2_with_usage, .timeout = 30)
{
    const char *v = exe("VMEMCTL_EXE");
    char *dir = dir_make();
    char *file = path_join(dir, "x.json"); /* "@" below */
    static const char *const cases[][6] = {
        {NULL},
        {"frobnicate", NULL},
        {"set-limit", NULL},
        {"set-limit", "@", NULL},
        {"set-limit", "@", "lots", NULL},
        {"set-limit", "@", "-1G", NULL},
        {"set-limit", "@", "1G", "extra", NULL},
        {"set", "@", "colour", "blue", NULL},
        {"set", "@", "perf", "101", NULL},
        {"set", "@", "perf", "fast", NULL},
        {"set", "@", "perf", " 40", NULL},
        {"set", "@", "perf", "+40", NULL},
        {"set", "@", "host_fallback", "maybe", NULL},
        {"stats", NULL},
        {"stats", "--bogus", "@", NULL},
        {"watch", "--count", "0", "@", NULL},
        {"watch", "--interval", "soon", "@", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[8] = {v};
        for (int j = 0; cases[i][j]; j++)
            argv[j + 1] = strcmp(cases[i][j], "@") ? cases[i][j] : file;
        run_t r;
        run(&r, argv);
        cr_expect_eq(r.status, 2, "case %zu (%s): exit %d", i, cases[i][0] ? cases[i][0] : "-",
                     r.status);
        cr_expect(strstr(r.err, "usage:") != NULL, "case %zu: no usage on stderr: %s", i, r.err);
        cr_expect_eq(access(file, F_OK), -1, "case %zu wrote the file", i);
    }
    run_t r;
    run(&r, (const char *const[]){v, "--help", NULL});
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "set-limit") != NULL);
    free(file);
    dir_remove(dir);
}

/* An interval that rounds to no sleep at all would spin a CPU: below 0.01 s
 * is a bad argument, as "soon" is. */
Test(control_vmemctl, watch_interval_below_the_minimum_is_refused, .timeout = 30)
{
    const char *v = exe("VMEMCTL_EXE");
    char *dir = dir_make();
    char *file = path_join(dir, "stats.json"); /* never created */
    static const char *const bad[] = {"1e-10", "0.001", "0.0099", "1e-300"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_t r;
        run(&r, (const char *const[]){v, "watch", "--count", "2", "--interval", bad[i], file,
                                      NULL});
        cr_expect_eq(r.status, 2, "--interval %s: exit %d", bad[i], r.status);
        cr_expect(strstr(r.err, "invalid --interval") != NULL, "--interval %s: %s", bad[i], r.err);
        cr_expect(strstr(r.err, "0.01") != NULL, "--interval %s: minimum not named: %s", bad[i],
                  r.err);
        cr_expect(strstr(r.err, "usage:") != NULL, "--interval %s: no usage: %s", bad[i], r.err);
    }
    run_t r; /* the minimum itself is accepted */
    run(&r, (const char *const[]){v, "watch", "--count", "2", "--interval", "0.01", file, NULL});
    cr_assert_eq(r.status, 0, "--interval 0.01: exit %d: %s", r.status, r.err);
    free(file);
    dir_remove(dir);
}

Test(control_vmemctl, stats_and_watch_show_the_file, .timeout = 30)
{
    char *dir = dir_make();
    char *stats = path_join(dir, "stats.json");
    vmem_t *v = instance_make(768 * MiB, NULL, stats, NULL, 0);
    void *p = vmem_alloc(v, 100 * MiB);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);

    run_t r;
    run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "stats", stats, NULL});
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert(strstr(r.out, "limit                768.00 MiB") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, "in use               100.00 MiB") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, "backend sim") != NULL, "%s", r.out);

    run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "stats", "--json", stats, NULL});
    cr_assert_eq(r.status, 0);
    char raw[8192];
    cmd_slurp(stats, raw, sizeof raw);
    cr_assert_str_eq(r.out, raw, "--json must print the file as it is");

    run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "watch", "--count", "3", "--interval", "0.05",
                                  stats, NULL});
    cr_assert_eq(r.status, 0);
    int tables = 0;
    for (const char *s = r.out; (s = strstr(s, "libvmem statistics:")); s++)
        tables++;
    cr_assert_eq(tables, 3, "%s", r.out);

    char *missing = path_join(dir, "none.json");
    run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "stats", missing, NULL});
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "cannot read") != NULL);
    vmem_free(v, p);
    vmem_destroy(v);
    free(missing);
    free(stats);
    dir_remove(dir);
}

/* An instance in this process follows vmemctl within one step: the change
 * is held back until the step end, then applied by it. */
Test(control_vmemctl, instance_follows_set_limit_at_the_next_step_end, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    vmem_t *v = instance_make(8 * GiB, ctl, NULL, NULL, 0);
    const char *sizes[] = {"2G", "6G", "1G", "8G"};
    size_t bytes[] = {2 * GiB, 6 * GiB, 1 * GiB, 8 * GiB};
    for (int i = 0; i < 4; i++) {
        run_t r;
        run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set-limit", ctl, sizes[i], NULL});
        cr_assert_eq(r.status, 0, "stderr: %s", r.err);
        cr_assert(wait_file_limit(v, bytes[i]), "%s not seen", sizes[i]);
        cr_assert_eq(vmem_step_end(v), VMEM_OK);
        cr_assert_eq(limit_of(v), bytes[i]);
    }
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

/* Another process (vmem-control-demo) is lowered and raised by vmemctl,
 * and `vmemctl stats` shows each change. */
Test(control_vmemctl, demo_process_follows_set_limit, .timeout = 60)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    char *stats = path_join(dir, "stats.json");
    char out[] = "/tmp/vmem-demo-out-XXXXXX";
    int fo = mkstemp(out);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        dup2(fo, 1);
        dup2(fo, 2);
        setenv("VMEM_BACKEND", "sim", 1);
        execl(exe("CONTROL_DEMO_EXE"), "vmem-control-demo", "--steps", "0", "--step-ms", "20",
              "--work", "1G", ctl, stats, (char *)NULL);
        _exit(127);
    }
    cr_assert(WAIT_FOR(access(stats, F_OK) == 0), "the demo never wrote its statistics");
    const char *sizes[] = {"2G", "6G", "512M", "8G"};
    const char *shown[] = {"2.00 GiB", "6.00 GiB", "512.00 MiB", "8.00 GiB"};
    int ok = 1;
    for (int i = 0; i < 4 && ok; i++) {
        run_t r;
        run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set-limit", ctl, sizes[i], NULL});
        cr_assert_eq(r.status, 0, "stderr: %s", r.err);
        char want[64];
        snprintf(want, sizeof want, "limit                %s", shown[i]);
        ok = WAIT_FOR(({
            run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "stats", stats, NULL});
            r.status == 0 && strstr(r.out, want) != NULL;
        }));
        cr_expect(ok, "the demo did not follow set-limit %s; last stats:\n%s", sizes[i], r.out);
    }
    kill(pid, SIGTERM);
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the demo did not exit cleanly");
    char log[16384];
    cmd_slurp(out, log, sizeof log);
    close(fo);
    unlink(out);
    cr_assert(strstr(log, "limit 8.00 GiB -> 2.00 GiB") != NULL, "demo output:\n%s", log);
    cr_assert(strstr(log, "done after") != NULL, "demo output:\n%s", log);
    free(ctl);
    free(stats);
    dir_remove(dir);
}

/* ------------------------------------------------------------------------ */
/* Hostile files and numbers (issue 16)                                     */
/* ------------------------------------------------------------------------ */

/* The text of a file ("" if unreadable). */
static void text_of(const char *path, char *buf, size_t len) { cmd_slurp(path, buf, len); }

/* Sizes are written as exact integers: 2^64-1 was written as
 * 1.8446744073709552e+19 (which libvmem rejects) and 2^53+1 as ...990. */
Test(control_vmemctl, sizes_written_exactly, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    static const char *sizes[] = {"18446744073709551615", "9007199254740993", "16T", "8G"};
    static const char *want[] = {"18446744073709551615", "9007199254740993", "17592186044416",
                                 "8589934592"};
    for (int i = 0; i < 4; i++) {
        run_t r;
        run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set-limit", ctl, sizes[i], NULL});
        cr_assert_eq(r.status, 0, "stderr: %s", r.err);
        char text[256], key[64];
        text_of(ctl, text, sizeof text);
        snprintf(key, sizeof key, "\"limit\":\t%s\n", want[i]);
        cr_assert(strstr(text, key) != NULL, "%s: file is %s", sizes[i], text);
    }
    /* other keys keep their exact text when the file is rewritten */
    file_put_atomic(ctl, "{\"host_limit\": 9007199254740993, \"x\": [12345678901234567890, 1.5]}");
    run_t r;
    run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set-limit", ctl, "1G", NULL});
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    char text[256];
    text_of(ctl, text, sizeof text);
    cr_assert(strstr(text, "9007199254740993") && strstr(text, "12345678901234567890") &&
                  strstr(text, "1.5"),
              "file is %s", text);
    /* and libvmem reads them back exactly */
    vmem_t *v = instance_make(2 * GiB, ctl, NULL, NULL, 1);
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    cr_assert_eq(s.host_limit, (size_t)9007199254740993ull);
    cr_assert_eq(s.limit, 1 * GiB);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

/* A symlinked control file (Kubernetes, schedulers) is written through the
 * link: the link stays and its target changes. */
Test(control_vmemctl, symlink_written_through, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    char *real = path_join(dir, "real.json");
    file_put_atomic(real, "{\"perf\": 50}");
    cr_assert_eq(chmod(real, 0600), 0);
    cr_assert_eq(symlink("real.json", ctl), 0);
    run_t r;
    run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set-limit", ctl, "3G", NULL});
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    struct stat st;
    cr_assert_eq(lstat(ctl, &st), 0);
    cr_assert(S_ISLNK(st.st_mode), "the symlink was replaced by a file");
    cr_assert_eq(stat(real, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "the target's mode is kept");
    cJSON *root = json_load(real);
    cr_assert_eq(json_num(root, "limit"), 3.0 * GiB);
    cr_assert_eq(json_num(root, "perf"), 50);
    cJSON_Delete(root);
    free(real);
    free(ctl);
    dir_remove(dir);
}

/* A FIFO, a device or a directory at the path: exit 1 at once with one
 * clear message, never a hang in open() or read(), nothing replaced. */
Test(control_vmemctl, odd_files_refused, .timeout = 30)
{
    char *dir = dir_make();
    char *fifo = path_join(dir, "fifo");
    char *sub = path_join(dir, "sub");
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    cr_assert_eq(mkdir(sub, 0755), 0);
    const char *paths[] = {fifo, sub, "/dev/null"};
    const char *kinds[] = {"a FIFO", "a directory", "a character device"};
    for (int i = 0; i < 3; i++) {
        run_t r;
        run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set-limit", paths[i], "1G", NULL});
        cr_expect_eq(r.status, 1, "%s: exit %d", paths[i], r.status);
        char want[128];
        snprintf(want, sizeof want, "not a regular file (%s)", kinds[i]);
        cr_expect(strstr(r.err, want) != NULL, "%s: %s", paths[i], r.err);
        run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "stats", paths[i], NULL});
        cr_expect_eq(r.status, 1, "stats %s: exit %d", paths[i], r.status);
        cr_expect(strstr(r.err, want) != NULL, "stats %s: %s", paths[i], r.err);
    }
    struct stat st;
    cr_assert_eq(lstat(fifo, &st), 0);
    cr_assert(S_ISFIFO(st.st_mode));
    cr_assert_eq(lstat("/dev/null", &st), 0);
    cr_assert(S_ISCHR(st.st_mode));
    rmdir(sub);
    free(sub);
    free(fifo);
    dir_remove(dir);
}

/* --gpu takes only keys libvmem matches against a device: a PCI bus id or
 * "sim:N"; anything else was written and then ignored as an unknown key. */
Test(control_vmemctl, gpu_key_must_be_one_libvmem_reads, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    static const char *bad[] = {"0", "GPU-5f1c", "gpu:0", "sim:", "sim:x", "3b:00", "0000:3b:00.0x",
                                "00000000000:3b:00.0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_t r;
        run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set-limit", "--gpu", bad[i], ctl, "1G",
                                      NULL});
        cr_expect_eq(r.status, 2, "--gpu %s: exit %d", bad[i], r.status);
        cr_expect(strstr(r.err, "bus id") != NULL, "--gpu %s: %s", bad[i], r.err);
        cr_expect_eq(access(ctl, F_OK), -1, "--gpu %s wrote the file", bad[i]);
    }
    static const char *good[] = {"sim:0", "SIM:12", "0000:3b:00.0", "3B:00.0", "00000000:3b:00.0"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        run_t r;
        run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set-limit", "--gpu", good[i], ctl, "1G",
                                      NULL});
        cr_expect_eq(r.status, 0, "--gpu %s: %s", good[i], r.err);
    }
    free(ctl);
    dir_remove(dir);
}

/* --gpu finds the device's entry however it is spelled (libvmem compares
 * ids by value: nvidia-smi's 00000000:3B:00.0 is CUDA's 0000:3b:00.0, and
 * sim:0 is SIM:0).  A second entry for the same device was added under the
 * other spelling; the library applies both in file order, so a later
 * vmemctl run that updated the first one was overridden by the second. */
Test(control_vmemctl, gpu_entry_found_by_value, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    file_put_atomic(ctl, "{\"SIM:0\": {\"mem_limit\": \"512M\", \"perf\": 70},"
                         " \"00000000:3B:00.0\": {\"mem_limit\": 1048576}}");
    static const struct { const char *gpu, *size; size_t bytes; } steps[] = {
        {"sim:0", "256M", 256 * MiB}, {"SIM:0", "128M", 128 * MiB}, {"Sim:0", "384M", 384 * MiB}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        run_t r;
        run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set-limit", "--gpu", steps[i].gpu, ctl,
                                      steps[i].size, NULL});
        cr_assert_eq(r.status, 0, "stderr: %s", r.err);
        vmem_t *v = instance_make(1 * GiB, ctl, NULL, NULL, 0);
        cr_assert_eq(limit_of(v), steps[i].bytes, "after --gpu %s %s: limit %zu", steps[i].gpu,
                     steps[i].size, limit_of(v));
        vmem_destroy(v);
    }
    run_t r;
    run(&r, (const char *const[]){exe("VMEMCTL_EXE"), "set-limit", "--gpu", "0000:3b:00.0", ctl,
                                  "2G", NULL});
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cJSON *root = json_load(ctl);
    int entries = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) entries++;
    cr_assert_eq(entries, 2, "an entry was added for a device the file already names");
    const cJSON *sim = cJSON_GetObjectItemCaseSensitive(root, "SIM:0");
    cr_assert_eq(json_num(sim, "mem_limit"), 384.0 * MiB);
    cr_assert_eq(json_num(sim, "perf"), 70, "the entry's other keys are kept");
    cr_assert_eq(json_num(cJSON_GetObjectItemCaseSensitive(root, "00000000:3B:00.0"), "mem_limit"),
                 2.0 * GiB);
    cJSON_Delete(root);
    free(ctl);
    dir_remove(dir);
}

/* The demo's counts are numbers or a usage error: atol read "--steps abc"
 * as 0, which means "run until stopped". */
Test(control_vmemctl, demo_counts_are_checked, .timeout = 30)
{
    static const char *const bad[][2] = {{"--steps", "abc"}, {"--steps", "5x"}, {"--step-ms", "-1"},
                                         {"--step-ms", "1e3"}};
    for (int i = 0; i < 4; i++) {
        run_t r;
        run(&r, (const char *const[]){exe("CONTROL_DEMO_EXE"), bad[i][0], bad[i][1], "/nonexistent/c",
                                      "/nonexistent/s", NULL});
        cr_expect_eq(r.status, 2, "%s %s: exit %d", bad[i][0], bad[i][1], r.status);
    }
}
