/*
 * Standalone driver for the operation fuzzer (any compiler, no libFuzzer).
 *
 *   fuzz_driver [--seed S] [--runs N] [--max-len L] [--corpus DIR] [FILE ...]
 *
 * Runs every FILE given (e.g. a crash input from libFuzzer), then every file
 * of the corpus directory, then N inputs generated from seed S: half of them
 * uniformly random bytes of length 1..L, half mutations (byte flips, inserts,
 * splices) of the corpus files.  The same seed gives the same inputs.
 * FUZZ_RUNS and FUZZ_MAX_LEN in the environment override --runs and
 * --max-len (scripts/sanitize.sh shortens the meson test with them).  Prints
 * the operation count at the end; any violation aborts inside the harness,
 * and the input that caused it is written to fuzz-crash-<seed>-<run>.bin
 * (in $FUZZ_CRASH_DIR, default the current directory) for replay.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fuzz_ops.h"

typedef struct input {
    uint8_t *data;
    size_t len;
} input_t;

/* The input being run, for the crash handler. */
static const uint8_t *current_data;
static size_t current_len;
static char crash_path[4096];

static void crash_save(int sig)
{
    int fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        size_t off = 0;
        while (off < current_len) {
            ssize_t n = write(fd, current_data + off, current_len - off);
            if (n <= 0)
                break;
            off += (size_t)n;
        }
        close(fd);
        static const char msg[] = "fuzz_driver: input saved to ";
        (void)!write(2, msg, sizeof msg - 1);
        (void)!write(2, crash_path, strlen(crash_path));
        (void)!write(2, "\n", 1);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void input_run(const uint8_t *data, size_t len, uint64_t seed, uint64_t run)
{
    static const char *dir;
    if (!dir) {
        dir = getenv("FUZZ_CRASH_DIR");
        if (!dir || !*dir)
            dir = ".";
    }
    snprintf(crash_path, sizeof crash_path, "%s/fuzz-crash-%llu-%llu.bin", dir,
             (unsigned long long)seed, (unsigned long long)run);
    current_data = data;
    current_len = len;
    LLVMFuzzerTestOneInput(data, len);
    current_data = NULL;
    current_len = 0;
}

static uint64_t rng_next(uint64_t *s)
{
    /* splitmix64: any seed, including 0, gives a good stream */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int file_read(const char *path, input_t *in)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf)
        return -1;
    in->data = buf;
    in->len = len;
    return 0;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads every regular file of dir, in name order. */
static size_t corpus_load(const char *dir, input_t **out)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "fuzz_driver: cannot open corpus %s: %s\n", dir, strerror(errno));
        exit(2);
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        names = realloc(names, (n + 1) * sizeof *names);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, name_cmp);
    input_t *ins = calloc(n ? n : 1, sizeof *ins);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (file_read(path, &ins[m]) == 0)
            m++;
        free(names[i]);
    }
    free(names);
    *out = ins;
    return m;
}

/* A mutation of a corpus entry: up to 8 edits, optionally spliced with a
 * second entry. */
static input_t mutate(uint64_t *rng, const input_t *corpus, size_t n, size_t max_len)
{
    const input_t *a = &corpus[rng_next(rng) % n];
    size_t len = a->len ? a->len : 1;
    if (len > max_len * 8)
        len = max_len * 8;
    input_t out = {malloc(len + 64), len};
    memcpy(out.data, a->data, a->len < len ? a->len : len);
    if (a->len < len)
        memset(out.data + a->len, 0, len - a->len);
    if (n > 1 && rng_next(rng) % 4 == 0) { /* splice the tail of another */
        const input_t *b = &corpus[rng_next(rng) % n];
        if (b->len > 1) {
            size_t at = 1 + rng_next(rng) % len, from = 1 + rng_next(rng) % (b->len - 1);
            size_t take = b->len - from;
            if (at + take > len)
                take = len - at;
            memcpy(out.data + at, b->data + from, take);
        }
    }
    unsigned edits = 1 + rng_next(rng) % 8;
    for (unsigned i = 0; i < edits; i++) {
        uint64_t x = rng_next(rng);
        size_t at = (x >> 8) % out.len;
        switch (x % 4) {
        case 0: out.data[at] ^= (uint8_t)(1u << ((x >> 40) & 7)); break;
        case 1: out.data[at] = (uint8_t)(x >> 48); break;
        case 2: /* insert a random byte (room was reserved) */
            if (out.len < len + 64) {
                memmove(out.data + at + 1, out.data + at, out.len - at);
                out.data[at] = (uint8_t)(x >> 48);
                out.len++;
            }
            break;
        default: /* truncate */
            if (at > 1)
                out.len = at;
            break;
        }
    }
    return out;
}

static void usage(void)
{
    fprintf(stderr, "usage: fuzz_driver [--seed S] [--runs N] [--max-len L] [--corpus DIR] [FILE ...]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    uint64_t seed = 1, runs = 1000;
    size_t max_len = 2048;
    const char *corpus_dir = NULL;
    int nfiles = 0;
    char **files = calloc((size_t)argc, sizeof *files);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--max-len") && i + 1 < argc)
            max_len = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--corpus") && i + 1 < argc)
            corpus_dir = argv[++i];
        else if (argv[i][0] == '-')
            usage();
        else
            files[nfiles++] = argv[i];
    }
    /* Sanitizer and valgrind runs shorten the meson test without editing it. */
    const char *env_runs = getenv("FUZZ_RUNS");
    if (env_runs && *env_runs)
        runs = strtoull(env_runs, NULL, 0);
    const char *env_len = getenv("FUZZ_MAX_LEN");
    if (env_len && *env_len)
        max_len = strtoull(env_len, NULL, 0);
    if (max_len < 1)
        usage();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = crash_save;
    sigaction(SIGABRT, &sa, NULL);
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < nfiles; i++) {
        input_t in;
        if (file_read(files[i], &in) != 0) {
            fprintf(stderr, "fuzz_driver: cannot read %s\n", files[i]);
            return 2;
        }
        fprintf(stderr, "fuzz_driver: running %s (%zu bytes)\n", files[i], in.len);
        LLVMFuzzerTestOneInput(in.data, in.len);
        free(in.data);
    }
    input_t *corpus = NULL;
    size_t ncorpus = corpus_dir ? corpus_load(corpus_dir, &corpus) : 0;
    for (size_t i = 0; i < ncorpus; i++)
        input_run(corpus[i].data, corpus[i].len, seed, UINT64_MAX - i);
    uint64_t rng = seed;
    for (uint64_t run = 0; run < runs; run++) {
        input_t in;
        if (ncorpus && (rng_next(&rng) & 1)) {
            in = mutate(&rng, corpus, ncorpus, max_len);
        } else {
            in.len = 1 + rng_next(&rng) % max_len;
            in.data = malloc(in.len);
            for (size_t j = 0; j < in.len; j += 8) {
                uint64_t x = rng_next(&rng);
                memcpy(in.data + j, &x, in.len - j < 8 ? in.len - j : 8);
            }
        }
        input_run(in.data, in.len, seed, run);
        free(in.data);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("fuzz_driver: seed %llu, %llu generated runs, %zu corpus files, %.1f s, %.0f ops/s\n",
           (unsigned long long)seed, (unsigned long long)runs, ncorpus, secs,
           secs > 0 ? (double)fuzz_totals.ops / secs : 0.0);
    fuzz_totals_print(stdout);
    for (size_t i = 0; i < ncorpus; i++)
        free(corpus[i].data);
    free(corpus);
    free(files);
    return 0;
}
