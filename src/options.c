/* Configuration defaults, the VMEM_* environment, size parsing and names. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmem_internal.h"

const char *vmem_strerror(vmem_status_t st)
{
    switch (st) {
    case VMEM_OK: return "success";
    case VMEM_PENDING: return "shrink pending: live data holds more than the new limit";
    case VMEM_ERR_INVALID: return "invalid argument";
    case VMEM_ERR_SIZE: return "invalid size (zero, or too large to round)";
    case VMEM_ERR_NOMEM: return "out of memory: device limit reached and host fallback exhausted";
    case VMEM_ERR_FOREIGN_PTR: return "pointer not allocated by this instance";
    case VMEM_ERR_DOUBLE_FREE: return "pointer already freed";
    case VMEM_ERR_BACKEND: return "backend error";
    case VMEM_ERR_UNAVAILABLE: return "backend unavailable (no GPU, no driver, or not built)";
    case VMEM_ERR_ABOVE_CAP: return "limit above the start cap";
    case VMEM_ERR_ENV: return "invalid VMEM_* environment variable";
    case VMEM_ERR_IO: return "I/O error";
    case VMEM_ERR_PARSE: return "malformed input";
    case VMEM_ERR_UNSUPPORTED: return "operation not supported";
    case VMEM_ERR_BUSY: return "resource busy";
    }
    return "unknown status";
}

const char *vmem_backend_name(vmem_backend_kind_t kind)
{
    switch (kind) {
    case VMEM_BACKEND_AUTO: return "auto";
    case VMEM_BACKEND_SIM: return "sim";
    case VMEM_BACKEND_SIM_VMM: return "sim-vmm";
    case VMEM_BACKEND_CUDA: return "cuda";
    case VMEM_BACKEND_VMM: return "vmm";
    }
    return "?";
}

void vmem_config_init(vmem_config_t *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->size = sizeof *cfg;
    cfg->version = VMEM_CONFIG_VERSION;
    cfg->backend = VMEM_BACKEND_AUTO;
    cfg->host_fallback = 1;
    cfg->log_level = VMEM_LOG_WARN;
}

vmem_status_t vmem_parse_size(const char *text, size_t *out)
{
    if (!text || !out)
        return VMEM_ERR_PARSE;
    const char *s = text;
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return VMEM_ERR_PARSE;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return VMEM_ERR_PARSE;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && toupper((unsigned char)end[0]) == 'I' && toupper((unsigned char)end[1]) == 'B')
        end += 2;
    else if (shift && toupper((unsigned char)end[0]) == 'B')
        end++;
    while (isspace((unsigned char)*end))
        end++;
    if (*end)
        return VMEM_ERR_PARSE;
    if (shift && v > (SIZE_MAX >> shift))
        return VMEM_ERR_PARSE;
    *out = (size_t)(v << shift);
    return VMEM_OK;
}

static int parse_backend(const char *s, vmem_backend_kind_t *out)
{
    static const struct { const char *name; vmem_backend_kind_t kind; } names[] = {
        {"auto", VMEM_BACKEND_AUTO}, {"sim", VMEM_BACKEND_SIM}, {"sim-vmm", VMEM_BACKEND_SIM_VMM},
        {"cuda", VMEM_BACKEND_CUDA}, {"vmm", VMEM_BACKEND_VMM},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) {
            *out = names[i].kind;
            return 0;
        }
    return -1;
}

int options_parse_bool(const char *s, int *out)
{
    if (!strcmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on")) {
        *out = 1;
        return 0;
    }
    if (!strcmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off")) {
        *out = 0;
        return 0;
    }
    return -1;
}

vmem_status_t options_remap_from_env(int *on)
{
    const char *e = getenv("VMEM_REMAP");
    if (e && options_parse_bool(e, on) != 0) {
        vmem_log(NULL, VMEM_LOG_ERROR, "invalid VMEM_REMAP=\"%s\" (expected on or off)", e);
        return VMEM_ERR_ENV;
    }
    return VMEM_OK;
}

int options_parse_u64(const char *s, uint64_t *out)
{
    if (!isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_int(const char *s, int *out)
{
    uint64_t v;
    if (options_parse_u64(s, &v) != 0 || v > 1024)
        return -1;
    *out = (int)v;
    return 0;
}

/* A probability: decimal digits with an optional fraction and exponent
 * ("0.01", ".5", "1e-3"), from 0 to 1.  No sign, blanks, hex, inf or nan;
 * a value too small for a double (1e-400) is 0. */
static int parse_rate(const char *s, double *out)
{
    const char *p = s;
    size_t digits = 0;
    for (; isdigit((unsigned char)*p); p++)
        digits++;
    if (*p == '.')
        for (p++; isdigit((unsigned char)*p); p++)
            digits++;
    if (!digits)
        return -1;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!isdigit((unsigned char)*p))
            return -1;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p)
        return -1;
    errno = 0;
    double d = strtod(s, NULL);
    if (errno == ERANGE && d > 1) /* overflow; underflow is a rate of ~0 */
        return -1;
    if (!(d >= 0.0 && d <= 1.0))
        return -1;
    *out = d;
    return 0;
}

/* Indexed by vmem_placement_t. */
static const char *const placement_names[] = {"planned", "naive", "farthest", "largest", "swap"};

const char *placement_name(vmem_placement_t p)
{
    return (unsigned)p < sizeof placement_names / sizeof *placement_names ? placement_names[p]
                                                                           : "unknown";
}

int placement_parse(const char *s, vmem_placement_t *out)
{
    for (unsigned i = 0; i < sizeof placement_names / sizeof *placement_names; i++) {
        if (!strcasecmp(s, placement_names[i])) {
            *out = (vmem_placement_t)i;
            return 0;
        }
    }
    return -1;
}

static int parse_level(const char *s, vmem_log_level_t *out)
{
    static const char *names[] = {"debug", "info", "warn", "error", "none"};
    for (int i = 0; i < 5; i++)
        if (!strcasecmp(s, names[i])) {
            *out = (vmem_log_level_t)i;
            return 0;
        }
    return -1;
}

/* One table: every VMEM_* variable, what it sets, and its default. */
enum opt_kind {
    OPT_SIZE, OPT_BOOL, OPT_U64, OPT_INT, OPT_RATE, OPT_STR, OPT_BACKEND, OPT_LEVEL, OPT_PLACEMENT
};
static const struct opt {
    const char *name;
    enum opt_kind kind;
    size_t offset;
    const char *what;
} options[] = {
    {"VMEM_BACKEND", OPT_BACKEND, offsetof(vmem_config_t, backend), "sim|sim-vmm|cuda|vmm|auto; default auto"},
    {"VMEM_DEVICE", OPT_INT, offsetof(vmem_config_t, device), "CUDA device ordinal; default 0"},
    {"VMEM_LIMIT", OPT_SIZE, offsetof(vmem_config_t, limit), "device limit; default the device's free memory"},
    {"VMEM_START_CAP", OPT_SIZE, offsetof(vmem_config_t, start_cap), "ceiling for raises; default the initial limit"},
    {"VMEM_HOST_LIMIT", OPT_SIZE, offsetof(vmem_config_t, host_limit), "host fallback limit; default 64G"},
    {"VMEM_HOST_FALLBACK", OPT_BOOL, offsetof(vmem_config_t, host_fallback), "spill to host; default 1"},
    {"VMEM_SIM_CAPACITY", OPT_SIZE, offsetof(vmem_config_t, sim_capacity), "simulated device size, 2 MiB to 16 TiB; default 80G"},
    {"VMEM_SIM_FAIL_NTH", OPT_U64, offsetof(vmem_config_t, sim_fail_nth), "fail the Nth sim region request; default 0 (off)"},
    {"VMEM_SIM_FAIL_RATE", OPT_RATE, offsetof(vmem_config_t, sim_fail_rate), "sim region failure probability; default 0"},
    {"VMEM_SIM_SEED", OPT_U64, offsetof(vmem_config_t, sim_seed), "seed for VMEM_SIM_FAIL_RATE; default 0"},
    {"VMEM_CONTROL_FILE", OPT_STR, offsetof(vmem_config_t, control_file), "watched JSON control file; default none"},
    {"VMEM_STATS_FILE", OPT_STR, offsetof(vmem_config_t, stats_file), "statistics JSON written at each step end; default none"},
    {"VMEM_CONTROL_IMMEDIATE", OPT_BOOL, offsetof(vmem_config_t, control_immediate), "apply control changes at once; default 0"},
    {"VMEM_LOG_LEVEL", OPT_LEVEL, offsetof(vmem_config_t, log_level), "debug|info|warn|error|none; default warn"},
    {"VMEM_PLACEMENT", OPT_PLACEMENT, offsetof(vmem_config_t, placement), "planned|naive|farthest|largest|swap; default planned"},
};

vmem_status_t vmem_config_from_env(vmem_config_t *cfg)
{
    if (!cfg || cfg->size < sizeof *cfg)
        return VMEM_INVALID_ARG(NULL);
    vmem_config_t tmp = *cfg;
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) {
        const struct opt *o = &options[i];
        const char *val = getenv(o->name);
        if (!val)
            continue;
        char *field = (char *)&tmp + o->offset;
        int bad = 0;
        switch (o->kind) {
        case OPT_SIZE:
            bad = vmem_parse_size(val, (size_t *)field) != VMEM_OK;
            if (!bad && o->offset == offsetof(vmem_config_t, sim_capacity))
                bad = *(size_t *)field < VMEM_SIM_CAPACITY_MIN ||
                      *(size_t *)field > VMEM_SIM_CAPACITY_MAX;
            break;
        case OPT_BOOL: bad = options_parse_bool(val, (int *)field); break;
        case OPT_U64: bad = options_parse_u64(val, (uint64_t *)field); break;
        case OPT_INT: bad = parse_int(val, (int *)field); break;
        case OPT_RATE: bad = parse_rate(val, (double *)field); break;
        case OPT_STR:
            if (!*val)
                bad = 1;
            else
                *(const char **)field = val;
            break;
        case OPT_BACKEND: bad = parse_backend(val, (vmem_backend_kind_t *)field); break;
        case OPT_LEVEL: bad = parse_level(val, (vmem_log_level_t *)field); break;
        case OPT_PLACEMENT: bad = placement_parse(val, (vmem_placement_t *)field); break;
        }
        if (bad) {
            vmem_log(NULL, VMEM_LOG_ERROR, "invalid %s=\"%s\" (expected %s)", o->name, val, o->what);
            return VMEM_ERR_ENV;
        }
    }
    /* The cap is a ceiling for the limit: a cap below the limit is a
     * mistake in the environment, not in the caller's config. */
    if (tmp.start_cap && tmp.limit > tmp.start_cap &&
        (getenv("VMEM_START_CAP") || getenv("VMEM_LIMIT"))) {
        vmem_log(NULL, VMEM_LOG_ERROR,
                 "VMEM_START_CAP (%zu) is below VMEM_LIMIT (%zu); the start cap is the ceiling "
                 "for the limit",
                 tmp.start_cap, tmp.limit);
        return VMEM_ERR_ENV;
    }
    *cfg = tmp;
    return VMEM_OK;
}

/* ------------------------------------------------------------------------ */
/* The device cap a GPU-sharing device plugin sets (docs/configuration.md)  */
/* ------------------------------------------------------------------------ */

/* Parses a cap in HAMi-core's documented syntax: decimal bytes, or decimal
 * digits with one suffix k, m or g (either case, powers of 1024): "1073741824",
 * "1048576k", "1024m", "1g".  Returns 0 (with *out set; 0 means "no cap", as
 * HAMi-core reads it) or -1 for anything else, overflow included. */
static int plugin_size_parse(const char *s, size_t *out)
{
    size_t n = strlen(s);
    if (n == 0)
        return -1;
    unsigned shift = 0;
    switch (s[n - 1]) {
    case 'k': case 'K': shift = 10; n--; break;
    case 'm': case 'M': shift = 20; n--; break;
    case 'g': case 'G': shift = 30; n--; break;
    default: break;
    }
    if (n == 0 || n > 20)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (v > (SIZE_MAX >> shift))
        return -1;
    *out = (size_t)(v << shift);
    return 0;
}

/* Reads one plugin variable.  Returns 0 with *cap 0 when it is unset or 0,
 * -1 (and logs) when it is malformed. */
static int plugin_var_read(const char *name, size_t *cap)
{
    *cap = 0;
    const char *val = getenv(name);
    if (!val)
        return 0;
    if (plugin_size_parse(val, cap) != 0) {
        vmem_log(NULL, VMEM_LOG_ERROR,
                 "invalid %s=\"%s\" (expected the device memory cap of a GPU-sharing plugin: "
                 "bytes, or a number with k, m or g, e.g. 1024m)",
                 name, val);
        return -1;
    }
    return 0;
}

vmem_status_t options_limit_default(const vmem_config_t *cfg, size_t *limit, char *source,
                                    size_t len)
{
    if (cfg->limit) {
        /* VMEM_LIMIT is named when the limit is its value (vmem_create(NULL)
         * and the adapters fill cfg from the environment). */
        const char *env = getenv("VMEM_LIMIT");
        size_t from_env = 0;
        int is_env = env && vmem_parse_size(env, &from_env) == VMEM_OK && from_env == cfg->limit;
        snprintf(source, len, "%s", is_env ? "VMEM_LIMIT" : "config");
        *limit = cfg->limit;
        return VMEM_OK;
    }
    char name[48];
    snprintf(name, sizeof name, "CUDA_DEVICE_MEMORY_LIMIT_%d", cfg->device);
    size_t cap = 0;
    if (plugin_var_read(name, &cap) != 0)
        return VMEM_ERR_ENV;
    if (cap == 0) { /* unset or 0: the variable for every device, as HAMi-core */
        snprintf(name, sizeof name, "CUDA_DEVICE_MEMORY_LIMIT");
        if (plugin_var_read(name, &cap) != 0)
            return VMEM_ERR_ENV;
    }
    if (cap) {
        snprintf(source, len, "%s", name);
        *limit = cap;
    } else {
        snprintf(source, len, "device");
        *limit = 0;
    }
    return VMEM_OK;
}
