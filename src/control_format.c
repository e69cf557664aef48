/* The control-file format's shared pieces; see control_format.h. */
#include "control_format.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define EXACT_DIGITS 16 /* 2^53 has 16 digits: from there a double may round */

/* Reads 1 to max hex digits at *s into *out and advances *s; -1 if none or
 * more than max. */
static int hex_field(const char **s, int max, unsigned long long *out)
{
    unsigned long long v = 0;
    int n = 0;
    for (; n < max && isxdigit((unsigned char)**s); n++, (*s)++)
        v = v * 16 + (unsigned)(isdigit((unsigned char)**s) ? **s - '0'
                                                              : (tolower((unsigned char)**s) - 'a' + 10));
    *out = v;
    return n > 0 && !isxdigit((unsigned char)**s) ? 0 : -1;
}

long long control_pci_bus_id(const char *s)
{
    unsigned long long f[4] = {0};
    const char *p = s;
    int colons = 0;
    for (const char *q = s; *q; q++)
        colons += *q == ':';
    int i = colons == 2 ? 0 : 1;
    if (colons != 1 && colons != 2)
        return -1;
    if (i == 0 && (hex_field(&p, 8, &f[0]) != 0 || *p++ != ':'))
        return -1;
    if (hex_field(&p, 2, &f[1]) != 0 || *p++ != ':' || hex_field(&p, 2, &f[2]) != 0 ||
        *p++ != '.' || hex_field(&p, 1, &f[3]) != 0 || *p != '\0')
        return -1;
    return (long long)((f[0] << 24) | (f[1] << 16) | (f[2] << 8) | f[3]);
}

int control_gpu_key_valid(const char *key)
{
    if (control_pci_bus_id(key) >= 0)
        return 1;
    if (strncasecmp(key, "sim:", 4) != 0 || !key[4] || strlen(key + 4) > 9)
        return 0;
    for (const char *p = key + 4; *p; p++)
        if (!isdigit((unsigned char)*p))
            return 0;
    return 1;
}

int control_gpu_key_same(const char *a, const char *b)
{
    long long x = control_pci_bus_id(a), y = control_pci_bus_id(b);
    if (x >= 0 && y >= 0)
        return x == y;
    return strcasecmp(a, b) == 0;
}

/* The number literals of a JSON text, in document order. */
typedef struct num_tokens {
    const char *text;
    size_t *start, *len;
    size_t n, next;
} num_tokens_t;

static int tokens_scan(num_tokens_t *t, const char *text, size_t len)
{
    size_t cap = 0;
    t->text = text;
    t->start = t->len = NULL;
    t->n = t->next = 0;
    for (size_t i = 0; i < len;) {
        char ch = text[i];
        if (ch == '"') {
            for (i++; i < len && text[i] != '"'; i++)
                if (text[i] == '\\')
                    i++;
            i++;
        } else if (ch == '-' || isdigit((unsigned char)ch)) {
            size_t s = i;
            while (i < len && (isdigit((unsigned char)text[i]) || strchr("+-.eE", text[i])))
                i++;
            if (t->n == cap) {
                cap = cap ? cap * 2 : 16;
                size_t *a = realloc(t->start, cap * sizeof *a);
                if (a)
                    t->start = a;
                size_t *b = a ? realloc(t->len, cap * sizeof *b) : NULL;
                if (!b)
                    return -1;
                t->len = b;
            }
            t->start[t->n] = s;
            t->len[t->n++] = i - s;
        } else {
            i++;
        }
    }
    return 0;
}

/* Walks items in document order (as cJSON built them), pairing each number
 * item with the next literal. */
static int exact_walk(cJSON *parent, num_tokens_t *t, int as_raw)
{
    for (cJSON *it = parent->child, *next; it; it = next) {
        next = it->next;
        if (cJSON_IsObject(it) || cJSON_IsArray(it)) {
            if (exact_walk(it, t, as_raw) != 0)
                return -1;
            continue;
        }
        if (!cJSON_IsNumber(it) || t->next >= t->n)
            continue;
        const char *lit = t->text + t->start[t->next];
        size_t n = t->len[t->next++], d = 0;
        while (d < n && isdigit((unsigned char)lit[d]))
            d++;
        if (d != n || n < EXACT_DIGITS)
            continue;
        char *copy = strndup(lit, n);
        cJSON *rep = copy ? (as_raw ? cJSON_CreateRaw(copy) : cJSON_CreateString(copy)) : NULL;
        free(copy);
        if (rep && it->string) { /* ReplaceItemViaPointer keeps no name */
            size_t kl = strlen(it->string) + 1;
            rep->string = cJSON_malloc(kl);
            if (rep->string)
                memcpy(rep->string, it->string, kl);
            else {
                cJSON_Delete(rep);
                rep = NULL;
            }
        }
        if (!rep || !cJSON_ReplaceItemViaPointer(parent, it, rep)) {
            cJSON_Delete(rep);
            return -1;
        }
    }
    return 0;
}

int control_json_exact(cJSON *root, const char *text, size_t len, int as_raw)
{
    num_tokens_t t;
    int rc = tokens_scan(&t, text, len);
    if (rc == 0 && t.n)
        rc = exact_walk(root, &t, as_raw);
    free(t.start);
    free(t.len);
    return rc;
}
