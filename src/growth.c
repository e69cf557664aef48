/* Growth and trim policy of the device arena (growth.h). */
#include "growth.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmem_internal.h"

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* Digits with at most one '.', nothing else (no blanks, signs, exponents or
 * hexadecimal, which strtod and strtoull would take). */
static int plain_decimal(const char *s)
{
    int dots = 0, digits = 0;
    for (; *s; s++) {
        if (*s >= '0' && *s <= '9')
            digits++;
        else if (*s == '.' && !dots)
            dots++;
        else
            return 0;
    }
    return digits > 0;
}

vmem_status_t growth_policy_from_env(growth_policy_t *p, int contiguous)
{
    growth_policy_t q = {.tight = 1, .share = 1, .trim = !contiguous, .trim_slack = GROWTH_TRIM_DEFAULT,
                         .trim_age = GROWTH_TRIM_AGE_DEFAULT};
    const char *g = getenv("VMEM_GROWTH");
    if (g) {
        if (strcmp(g, "tight") == 0)
            q.tight = 1;
        else if (strcmp(g, "legacy") == 0)
            q.tight = 0, q.share = 0;
        else {
            vmem_log(NULL, VMEM_LOG_ERROR, "invalid VMEM_GROWTH=\"%s\" (expected tight or legacy)",
                     g);
            return VMEM_ERR_ENV;
        }
    }
    const char *t = getenv("VMEM_TRIM");
    if (t) {
        char *end = NULL;
        errno = 0;
        double pct = plain_decimal(t) ? strtod(t, &end) : -1;
        if (strcmp(t, "off") == 0)
            q.trim = 0;
        else if (end != t && end && *end == '\0' && errno == 0 && pct >= 0 && pct <= 1000)
            q.trim_slack = pct / 100.0, q.trim = 1;
        else {
            vmem_log(NULL, VMEM_LOG_ERROR,
                     "invalid VMEM_TRIM=\"%s\" (expected a percentage 0-1000 or off)", t);
            return VMEM_ERR_ENV;
        }
    }
    const char *rule = getenv("VMEM_TRIM_RULE");
    if (rule) {
        if (strcmp(rule, "peak") == 0) {
            q.at_peak = 1;
            if (!t) /* on, with its own default slack */
                q.trim = 1, q.trim_slack = GROWTH_TRIM_PEAK_DEFAULT;
        } else if (strcmp(rule, "floor") != 0) {
            vmem_log(NULL, VMEM_LOG_ERROR,
                     "invalid VMEM_TRIM_RULE=\"%s\" (expected floor or peak)", rule);
            return VMEM_ERR_ENV;
        }
    }
    const char *age = getenv("VMEM_TRIM_AGE");
    if (age) {
        uint64_t n;
        if (options_parse_u64(age, &n) != 0) { /* digits only */
            vmem_log(NULL, VMEM_LOG_ERROR,
                     "invalid VMEM_TRIM_AGE=\"%s\" (expected a count of allocations)", age);
            return VMEM_ERR_ENV;
        }
        q.trim_age = n;
    }
    *p = q;
    return VMEM_OK;
}

size_t growth_size(const growth_policy_t *p, size_t minimum, size_t next_region, int dedicated,
                   int contiguous, size_t align, size_t offset, size_t room)
{
    size_t size = minimum;
    int tight = p->tight && contiguous;
    if (!tight && !dedicated && size < next_region)
        size = next_region;
    if (align && contiguous && (!tight || minimum >= align)) {
        /* End the region at a multiple of align, so that the next one starts
         * there: whole big handles (vmm). */
        size_t off = offset % align;
        size_t up = round_up(off + size, align) - off;
        if (up >= size && up <= room)
            size = up;
    }
    return size > room ? room : size;
}

size_t growth_trim_target(const growth_policy_t *p, size_t held, size_t grow, size_t hwm,
                          size_t peak)
{
    if (!p->trim)
        return SIZE_MAX;
    double allow_d = (double)hwm * (1.0 + p->trim_slack);
    size_t allow = allow_d >= (double)SIZE_MAX ? SIZE_MAX : (size_t)allow_d;
    if (p->at_peak && allow < peak)
        allow = peak; /* below its peak so far, the arena keeps what it holds */
    if (held <= allow && grow <= allow - held)
        return SIZE_MAX;
    return allow > grow ? allow - grow : 0;
}
