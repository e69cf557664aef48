/* vmemctl: the scheduler's side of libvmem's runtime control.
 *
 *   vmemctl set-limit [--gpu BUSID] CONTROL_FILE SIZE
 *   vmemctl set [--gpu BUSID] CONTROL_FILE KEY VALUE
 *   vmemctl stats [--json] STATS_FILE
 *   vmemctl watch [--count N] [--interval SECONDS] STATS_FILE
 *   vmemctl --help | --version
 *
 * set-limit and set rewrite the control file atomically (a temporary file
 * in the same directory, then rename), keeping every other key; the file is
 * created if missing.  Exit status: 0 success, 1 a file could not be read,
 * parsed or written, 2 bad arguments (usage on stderr).
 * See docs/control.md. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <vmem.h>

#include "control_format.h"
#include "prom.h"
#include "safefile.h"

#define EXIT_USAGE 2

/* The synopsis, and with full the description too. */
static void usage(FILE *f, int full)
{
    fprintf(f, "usage: vmemctl set-limit [--gpu BUSID] CONTROL_FILE SIZE\n"
               "       vmemctl set [--gpu BUSID] CONTROL_FILE KEY VALUE\n"
               "       vmemctl stats [--json] STATS_FILE\n"
               "       vmemctl watch [--count N] [--interval SECONDS] STATS_FILE\n");
    if (!full) {
        fprintf(f, "       vmemctl --help | --version\n");
        return;
    }
    fprintf(f,
            "\n"
            "  set-limit   set the device limit in a libvmem control file (SIZE: bytes or\n"
            "              K/M/G/T, powers of 1024); other keys are kept, the file is\n"
            "              replaced atomically and created if missing\n"
            "  set         set KEY to VALUE: limit SIZE, host_limit SIZE,\n"
            "              host_fallback true|false, perf 0-100 (GPU time share, 0 suspends)\n"
            "  --gpu BUSID write into the per-GPU entry BUSID (\"0000:3b:00.0\", or\n"
            "              \"sim:0\" for a simulated device) instead of the top level\n"
            "  stats       print a statistics file (VMEM_STATS_FILE) as a table; --json: raw;\n"
            "              --prometheus [--job NAME] [--device LABEL] [--output FILE.prom]\n"
            "              STATS_FILE...: Prometheus text format (docs/kubernetes.md)\n"
            "  watch       print the table again every second (--interval SECONDS, 0.01 to\n"
            "              3600); --count N stops after N refreshes\n"
            "  --version   print vmemctl's and the loaded libvmem's version\n"
            "\n"
            "exit status: 0 success, 1 a file could not be read, parsed or written,\n"
            "2 bad arguments\n");
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "vmemctl: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    usage(stderr, 0);
    return EXIT_USAGE;
}

/* ------------------------------------------------------------------------ */
/* Files                                                                    */
/* ------------------------------------------------------------------------ */

/* Reads a whole regular file (following symlinks; never blocks on a FIFO
 * or a device).  NULL with errno set (ENOENT: nothing there) and why
 * filled if it cannot be read. */
static char *file_slurp(const char *path, size_t *len, char *why, size_t wlen)
{
    int fd = safefile_open_read(path, why, wlen);
    if (fd < 0)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(why, wlen, "%s", strerror(errno));
            free(buf);
            buf = NULL;
            break;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n + 1 < cap)
            continue;
        if (cap > ((size_t)64 << 20)) {
            snprintf(why, wlen, "larger than 64 MiB");
            free(buf);
            buf = NULL;
            break;
        }
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            snprintf(why, wlen, "out of memory");
            break;
        }
        buf = nb;
        cap *= 2;
    }
    close(fd);
    if (!buf) {
        errno = EIO;
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Writes text to path atomically: a temporary file next to the file that
 * is replaced, then rename.  A symlink is written through (its target is
 * replaced, the link stays); anything but a regular file (or nothing) is
 * refused.  Keeps the mode of the file it replaces (0644 for a new one). */
static int file_replace(const char *path, const char *text)
{
    char why[128];
    char *target = safefile_replace_target(path, why, sizeof why);
    if (!target) {
        fprintf(stderr, "vmemctl: %s: %s\n", path, why);
        return -1;
    }
    char *tmp = NULL;
    int fd = safefile_temp(target, &tmp);
    if (fd < 0) {
        fprintf(stderr, "vmemctl: %s: cannot create a temporary file: %s\n", path, strerror(errno));
        free(target);
        return -1;
    }
    struct stat st;
    mode_t mode = stat(target, &st) == 0 ? (st.st_mode & 07777) : 0644;
    int ok = fchmod(fd, mode) == 0 && safefile_write_all(fd, text, strlen(text));
    ok = ok && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    ok = ok && rename(tmp, target) == 0;
    if (!ok) {
        fprintf(stderr, "vmemctl: %s: cannot write: %s\n", path, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    free(target);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------------------ */
/* set-limit, set                                                           */
/* ------------------------------------------------------------------------ */

static int parse_bool(const char *s, int *out)
{
    static const char *yes[] = {"true", "1", "yes", "on"}, *no[] = {"false", "0", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i]))
            return *out = 1, 0;
        if (!strcasecmp(s, no[i]))
            return *out = 0, 0;
    }
    return -1;
}

static void size_human(double b, char *buf, size_t len)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (b >= 1024 && u < 5) {
        b /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%.0f B", b);
    else
        snprintf(buf, len, "%.2f %s", b, units[u]);
}

/* Sets one key in the control file. */
static int control_set(const char *path, const char *gpu, const char *key, const char *value)
{
    cJSON *item;
    char shown[64];
    if (!strcmp(key, "limit") || !strcmp(key, "host_limit")) {
        size_t bytes;
        if (vmem_parse_size(value, &bytes) != VMEM_OK)
            return usage_error("invalid size \"%s\" (bytes, or a number with K, M, G, T)", value);
        char exact[24]; /* an integer of bytes, exactly (a double rounds above 2^53) */
        snprintf(exact, sizeof exact, "%zu", bytes);
        item = cJSON_CreateRaw(exact);
        char h[32];
        size_human((double)bytes, h, sizeof h);
        snprintf(shown, sizeof shown, "%zu (%s)", bytes, h);
    } else if (!strcmp(key, "host_fallback")) {
        int b;
        if (parse_bool(value, &b) != 0)
            return usage_error("invalid host_fallback \"%s\" (true or false)", value);
        item = cJSON_CreateBool(b);
        snprintf(shown, sizeof shown, "%s", b ? "true" : "false");
    } else if (!strcmp(key, "perf")) {
        char *end;
        errno = 0;
        long p = strtol(value, &end, 10);
        if (errno || end == value || *end || p < 0 || p > 100 || value[0] < '0' || value[0] > '9')
            return usage_error("invalid perf \"%s\" (an integer from 0 to 100)", value);
        item = cJSON_CreateNumber((double)p);
        snprintf(shown, sizeof shown, "%ld", p);
    } else {
        return usage_error("unknown key \"%s\" (limit, host_limit, host_fallback, perf)", key);
    }

    cJSON *root = NULL;
    size_t len = 0;
    char why[128];
    char *text = file_slurp(path, &len, why, sizeof why);
    if (text) {
        size_t ws = strspn(text, " \t\r\n");
        if (ws < len) {
            root = cJSON_ParseWithLength(text, len);
            /* other keys keep their digits when the file is written back */
            if (root && control_json_exact(root, text, len, 1) != 0) {
                fprintf(stderr, "vmemctl: out of memory\n");
                cJSON_Delete(root);
                cJSON_Delete(item);
                free(text);
                return 1;
            }
            if (!root || !cJSON_IsObject(root)) {
                fprintf(stderr,
                        "vmemctl: %s: not a JSON object; fix or remove it (it was not changed)\n",
                        path);
                cJSON_Delete(root);
                cJSON_Delete(item);
                free(text);
                return 1;
            }
        }
        free(text);
    } else if (errno != ENOENT) {
        fprintf(stderr, "vmemctl: %s: cannot read: %s\n", path, why);
        cJSON_Delete(item);
        return 1;
    }
    if (!root)
        root = cJSON_CreateObject();

    /* The entries to change: the top level, or every entry naming the
     * device --gpu names, however it is spelled (libvmem compares ids by
     * value and applies each entry of its device in file order, so one left
     * out could override the change); a new one if the file has none. */
    cJSON *targets[64];
    int ntargets = 0;
    if (gpu) {
        cJSON *it;
        cJSON_ArrayForEach(it, root)
        {
            if (!strchr(it->string, ':') || !control_gpu_key_same(it->string, gpu))
                continue;
            if (!cJSON_IsObject(it) || ntargets == (int)(sizeof targets / sizeof targets[0])) {
                fprintf(stderr, "vmemctl: %s: entry \"%s\" %s (it was not changed)\n", path,
                        it->string, cJSON_IsObject(it) ? "is one of too many for the device"
                                                       : "is not an object");
                cJSON_Delete(root);
                cJSON_Delete(item);
                return 1;
            }
            targets[ntargets++] = it;
        }
        if (!ntargets) {
            targets[ntargets++] = cJSON_CreateObject();
            cJSON_AddItemToObject(root, gpu, targets[0]);
        }
    } else {
        targets[ntargets++] = root;
    }
    /* "limit" and AntMan's "mem_limit" are synonyms: keep only one, the
     * per-GPU entries in AntMan's spelling. */
    const char *name = key;
    if (!strcmp(key, "limit"))
        name = gpu ? "mem_limit" : "limit";
    for (int i = 0; i < ntargets; i++) {
        cJSON *target = targets[i];
        cJSON *value = i ? cJSON_Duplicate(item, 1) : item;
        if (!value) {
            fprintf(stderr, "vmemctl: out of memory\n");
            cJSON_Delete(root);
            return 1;
        }
        if (!strcmp(key, "limit"))
            cJSON_DeleteItemFromObjectCaseSensitive(target, gpu ? "limit" : "mem_limit");
        if (cJSON_GetObjectItemCaseSensitive(target, name))
            cJSON_ReplaceItemInObjectCaseSensitive(target, name, value);
        else
            cJSON_AddItemToObject(target, name, value);
    }

    char *out = cJSON_Print(root);
    cJSON_Delete(root);
    if (!out) {
        fprintf(stderr, "vmemctl: out of memory\n");
        return 1;
    }
    size_t olen = strlen(out);
    char *withnl = malloc(olen + 2);
    if (!withnl) {
        cJSON_free(out);
        return 1;
    }
    memcpy(withnl, out, olen);
    memcpy(withnl + olen, "\n", 2);
    cJSON_free(out);
    int rc = file_replace(path, withnl);
    free(withnl);
    if (rc != 0)
        return 1;
    printf("%s: %s%s%s = %s\n", path, gpu ? gpu : "", gpu ? "." : "", name, shown);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* stats, watch                                                             */
/* ------------------------------------------------------------------------ */

enum row_kind { ROW_SIZE, ROW_COUNT, ROW_BOOL, ROW_TEXT, ROW_US, ROW_RATIO, ROW_PERF, ROW_LIMIT0 };

static const struct row {
    const char *group, *label, *key;
    enum row_kind kind;
} rows[] = {
    {"device", "limit", "limit", ROW_SIZE},
    {"device", "pending limit", "pendingLimit", ROW_LIMIT0},
    {"device", "shrink pending", "shrinkPending", ROW_BOOL},
    {"device", "start cap", "startCap", ROW_SIZE},
    {"device", "held", "deviceHeld", ROW_SIZE},
    {"device", "in use", "deviceInUse", ROW_SIZE},
    {"device", "requested", "deviceRequested", ROW_SIZE},
    {"device", "peak held", "devicePeakHeld", ROW_SIZE},
    {"device", "peak in use", "devicePeakInUse", ROW_SIZE},
    {"device", "regions", "deviceRegions", ROW_COUNT},
    {"device", "fragmentation", "fragmentation", ROW_RATIO},
    {"device", "limit from", "limitSource", ROW_TEXT},
    {"device", "CUDA ordinal", "device", ROW_COUNT},
    {"device", "unused (held, no block)", "deviceUnused", ROW_SIZE},
    {"device", "unused byte-seconds", "deviceUnusedByteSeconds", ROW_COUNT},
    {"device", "unused, mean", "deviceUnusedMean", ROW_SIZE},
    {"device", "trims", "deviceTrims", ROW_COUNT},
    {"device", "trimmed", "deviceTrimmedBytes", ROW_SIZE},
    {"device", "syncs (vmm)", "deviceSyncs", ROW_COUNT},
    {"device", "their wait (s)", "deviceSyncSeconds", ROW_RATIO},
    {"device", "remaps (no wait)", "deviceRemaps", ROW_COUNT},
    {"device", "remapped", "deviceRemappedBytes", ROW_SIZE},
    {"device", "remaps missed", "deviceRemapMisses", ROW_COUNT},
    {"device", "remaps refused", "deviceRemapRefusals", ROW_COUNT},
    {"device", "mapping (s, vmm)", "deviceMapSeconds", ROW_RATIO},
    {"device", "unmapping (s, vmm)", "deviceUnmapSeconds", ROW_RATIO},
    {"device", "remapping (s, vmm)", "deviceRemapSeconds", ROW_RATIO},
    {"device", "huge splits (vmm)", "deviceHugeSplits", ROW_COUNT},
    {"device", "big splits (vmm)", "deviceBigSplits", ROW_COUNT},
    {"device", "in those splits (s)", "deviceSplitSeconds", ROW_RATIO},
    {"device", "deferred frees", "deferredFrees", ROW_COUNT},
    {"device", "deferred, freed", "deferredFreedBytes", ROW_SIZE},
    {"device", "deferred, waiting", "deferredWaitingBytes", ROW_SIZE},
    {"device", "deferred, stream waits", "deferredStreamWaits", ROW_COUNT},
    {"device", "deferred, CPU waits", "deferredCpuWaits", ROW_COUNT},
    {"host", "fallback", "hostFallback", ROW_BOOL},
    {"host", "limit", "hostLimit", ROW_SIZE},
    {"host", "held", "hostHeld", ROW_SIZE},
    {"host", "in use", "hostInUse", ROW_SIZE},
    {"host", "peak held", "hostPeakHeld", ROW_SIZE},
    {"host", "peak in use", "hostPeakInUse", ROW_SIZE},
    {"activity", "allocations", "allocs", ROW_COUNT},
    {"activity", "frees", "frees", ROW_COUNT},
    {"activity", "spills to host", "spills", ROW_COUNT},
    {"activity", "spilled bytes", "spilledBytes", ROW_SIZE},
    {"activity", "failures", "failures", ROW_COUNT},
    {"activity", "bad frees", "badFrees", ROW_COUNT},
    {"activity", "steps", "steps", ROW_COUNT},
    {"activity", "perf (time share)", "perf", ROW_PERF},
    {"last step", "duration", "miniBatchDuration", ROW_US},
    {"last step", "runtime pauses (excluded)", "miniBatchExcludedDuration", ROW_US},
    {"last step", "device in use max", "deviceMemUsedMax", ROW_SIZE},
    {"last step", "device in use min", "deviceMemUsedMin", ROW_SIZE},
    {"last step", "device stable", "deviceMemStable", ROW_SIZE},
    {"last step", "device pool", "deviceMemPoolSize", ROW_SIZE},
    {"last step", "host in use max", "hostMemUsedMax", ROW_SIZE},
    {"last step", "host in use min", "hostMemUsedMin", ROW_SIZE},
    {"last step", "host stable", "hostMemStable", ROW_SIZE},
    {"last step", "host pool", "hostMemPoolSize", ROW_SIZE},
    {"last step", "swap reason", "swapReason", ROW_TEXT},
    {"placement", "mode", "placement", ROW_TEXT},
    {"placement", "placed on host", "placedHostAllocs", ROW_COUNT},
    {"placement", "placed bytes", "placedHostBytes", ROW_SIZE},
    {"placement", "fell back to host", "fallbackAllocs", ROW_COUNT},
    {"placement", "fallback bytes", "fallbackBytes", ROW_SIZE},
    {"placement", "moved to host", "movedToHostBytes", ROW_SIZE},
    {"placement", "moved to device", "movedToDeviceBytes", ROW_SIZE},
    {"placement", "planned steps", "plannedSteps", ROW_COUNT},
    {"placement", "diverged steps", "divergedSteps", ROW_COUNT},
    {"placement", "steps left naive", "naiveChosenSteps", ROW_COUNT},
    {"placement", "steps not recorded", "placementIdleSteps", ROW_COUNT},
    {"placement", "plan's host bytes", "planHostBytes", ROW_SIZE},
    {"placement", "host blocks freed", "hostFreedBytes", ROW_SIZE},
    {"placement", "their life (events)", "hostLifeEvents", ROW_RATIO},
    {"placement", "their life (s)", "hostLifeSeconds", ROW_RATIO},
    {"placement", "plan's swap bytes", "planSwapBytes", ROW_SIZE},
    {"placement", "swapped out", "swapOutBytes", ROW_SIZE},
    {"placement", "swapped back", "swapInBytes", ROW_SIZE},
    {"placement", "swap points", "swapPoints", ROW_COUNT},
    {"placement", "swaps skipped", "swapSkipped", ROW_COUNT},
    {"control", "control file", "controlFile", ROW_TEXT},
    {"control", "change pending", "controlPending", ROW_BOOL},
    {"control", "errors logged", "controlErrors", ROW_COUNT},
};

/* Keys shown in the title line rather than as rows. */
static const char *title_keys[] = {"version", "backend", "pid", "time"};

static void value_format(const cJSON *it, enum row_kind kind, char *buf, size_t len)
{
    if (!it) {
        snprintf(buf, len, "-");
        return;
    }
    double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    switch (kind) {
    case ROW_LIMIT0:
        if (d == 0) {
            snprintf(buf, len, "none");
            return;
        }
        /* fall through */
    case ROW_SIZE:
        if (isnan(d))
            break;
        size_human(d, buf, len);
        return;
    case ROW_COUNT:
        if (isnan(d))
            break;
        snprintf(buf, len, "%.0f", d);
        return;
    case ROW_RATIO:
        if (isnan(d))
            break;
        if (d == 0)
            snprintf(buf, len, "-");
        else
            snprintf(buf, len, "%.3f (held / in use)", d);
        return;
    case ROW_PERF:
        if (isnan(d))
            break;
        snprintf(buf, len, "%.0f%%%s", d, d == 0 ? " (suspended)" : d >= 100 ? " (no pacing)" : "");
        return;
    case ROW_US:
        if (isnan(d))
            break;
        snprintf(buf, len, "%.3f ms", d / 1000.0);
        return;
    case ROW_BOOL:
        if (!cJSON_IsBool(it))
            break;
        snprintf(buf, len, "%s", cJSON_IsTrue(it) ? "yes" : "no");
        return;
    case ROW_TEXT:
        if (!cJSON_IsString(it))
            break;
        snprintf(buf, len, "%s", it->valuestring);
        return;
    }
    char *raw = cJSON_PrintUnformatted(it);
    snprintf(buf, len, "%s", raw ? raw : "?");
    cJSON_free(raw);
}

static int key_known(const char *k)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (!strcmp(rows[i].key, k))
            return 1;
    for (size_t i = 0; i < sizeof title_keys / sizeof title_keys[0]; i++)
        if (!strcmp(title_keys[i], k))
            return 1;
    return 0;
}

/* Prints the statistics file as a table.  Returns 0, or 1 with a message. */
static int stats_print(const char *path, int json)
{
    size_t len = 0;
    char why[128];
    char *text = file_slurp(path, &len, why, sizeof why);
    if (!text) {
        fprintf(stderr, "vmemctl: %s: cannot read: %s\n", path, why);
        return 1;
    }
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root || !cJSON_IsObject(root)) {
        fprintf(stderr, "vmemctl: %s: not a libvmem statistics file (not a JSON object)\n", path);
        cJSON_Delete(root);
        free(text);
        return 1;
    }
    if (json) {
        fputs(text, stdout);
        if (len && text[len - 1] != '\n')
            putchar('\n');
        cJSON_Delete(root);
        free(text);
        return 0;
    }
    free(text);

    const cJSON *backend = cJSON_GetObjectItemCaseSensitive(root, "backend");
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(root, "pid");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "time");
    printf("libvmem statistics: %s\n", path);
    printf("  backend %s", cJSON_IsString(backend) ? backend->valuestring : "?");
    if (cJSON_IsNumber(pid))
        printf(", pid %.0f", pid->valuedouble);
    if (cJSON_IsNumber(t)) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        double age = (double)now.tv_sec + now.tv_nsec * 1e-9 - t->valuedouble;
        printf(", written %.1f s ago", age < 0 ? 0 : age);
    }
    printf("\n");
    const char *group = "";
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, rows[i].key);
        if (!it)
            continue;
        if (strcmp(group, rows[i].group)) {
            group = rows[i].group;
            printf("%s\n", group);
        }
        char val[96];
        value_format(it, rows[i].kind, val, sizeof val);
        printf("  %-20s %s\n", rows[i].label, val);
    }
    /* keys this version of vmemctl does not know, as they are */
    int other = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root)
    {
        if (key_known(it->string))
            continue;
        if (!other++)
            printf("other\n");
        char *raw = cJSON_PrintUnformatted(it);
        printf("  %-20s %s\n", it->string, raw ? raw : "?");
        cJSON_free(raw);
    }
    cJSON_Delete(root);
    fflush(stdout);
    return 0;
}

static int stats_watch(const char *path, long count, double interval)
{
    int tty = isatty(STDOUT_FILENO);
    for (long n = 1;; n++) {
        if (tty)
            fputs("\033[H\033[2J", stdout);
        else if (n > 1)
            putchar('\n');
        if (access(path, F_OK) != 0) {
            printf("vmemctl: waiting for %s\n", path);
            fflush(stdout);
        } else {
            stats_print(path, 0);
        }
        if (count > 0 && n >= count)
            return 0;
        struct timespec ts = {(time_t)interval, (long)((interval - (double)(time_t)interval) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Main                                                                     */
/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage_error("%s", "a command is needed");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout, 1);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("vmemctl %d.%d.%d (libvmem %s)\n", VMEM_VERSION_MAJOR, VMEM_VERSION_MINOR,
               VMEM_VERSION_PATCH, vmem_version());
        return 0;
    }
    if (!strcmp(cmd, "stats"))
        for (int i = 2; i < argc; i++)
            if (!strcmp(argv[i], "--prometheus"))
                return prom_cli(argc - 2, argv + 2);
    /* options, then positional arguments */
    const char *gpu = NULL;
    int json = 0;
    long count = 0;
    double interval = 1.0;
    const char *pos[4];
    int npos = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--gpu") && i + 1 < argc && (!strcmp(cmd, "set") || !strcmp(cmd, "set-limit"))) {
            gpu = argv[++i];
            if (!control_gpu_key_valid(gpu))
                return usage_error("invalid --gpu \"%s\" (a PCI bus id such as 0000:3b:00.0, or "
                                   "sim:N for a simulated device)",
                                   gpu);
        } else if (!strcmp(a, "--json") && !strcmp(cmd, "stats")) {
            json = 1;
        } else if (!strcmp(a, "--count") && i + 1 < argc && !strcmp(cmd, "watch")) {
            char *end;
            errno = 0;
            count = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || count <= 0 || errno)
                return usage_error("invalid --count \"%s\" (a positive integer)", argv[i]);
        } else if (!strcmp(a, "--interval") && i + 1 < argc && !strcmp(cmd, "watch")) {
            char *end;
            interval = strtod(argv[++i], &end);
            if (*end || end == argv[i] || !(interval >= 0.01 && interval <= 3600))
                return usage_error("invalid --interval \"%s\" (seconds, from 0.01 to 3600)",
                                   argv[i]);
        } else if (a[0] == '-' && a[1] == '-') {
            return usage_error("unknown option \"%s\"", a);
        } else if (npos < 4) {
            pos[npos++] = a;
        } else {
            return usage_error("too many arguments at \"%s\"", a);
        }
    }
    if (!strcmp(cmd, "set-limit")) {
        if (npos != 2)
            return usage_error("%s", "set-limit needs CONTROL_FILE SIZE");
        return control_set(pos[0], gpu, "limit", pos[1]);
    }
    if (!strcmp(cmd, "set")) {
        if (npos != 3)
            return usage_error("%s", "set needs CONTROL_FILE KEY VALUE");
        return control_set(pos[0], gpu, pos[1], pos[2]);
    }
    if (!strcmp(cmd, "stats")) {
        if (npos != 1)
            return usage_error("%s", "stats needs STATS_FILE");
        return stats_print(pos[0], json);
    }
    if (!strcmp(cmd, "watch")) {
        if (npos != 1)
            return usage_error("%s", "watch needs STATS_FILE");
        return stats_watch(pos[0], count, interval);
    }
    return usage_error("unknown command \"%s\"", cmd);
}
