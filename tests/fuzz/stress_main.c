/*
 * Standalone concurrency stress (no Criterion, so it runs under
 * ThreadSanitizer): every configuration of test_stress.c, in one process.
 *
 *   stress_main [--ops N] [--workers W] [--repeat R]
 *
 * Exits 0 when every run held, 1 otherwise (TSan reports exit 66 under
 * scripts/sanitize.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stress.h"

int main(int argc, char **argv)
{
    int ops = 6000, workers = 4, repeat = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ops") && i + 1 < argc)
            ops = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--workers") && i + 1 < argc)
            workers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: stress_main [--ops N] [--workers W] [--repeat R]\n");
            return 2;
        }
    }
    static const struct {
        const char *name;
        vmem_backend_kind_t backend;
        int streams, control_file, tags;
    } runs[] = {
        {"sim", VMEM_BACKEND_SIM, 0, 0, 0},
        {"sim-vmm", VMEM_BACKEND_SIM_VMM, 0, 0, 0},
        {"sim-vmm streams", VMEM_BACKEND_SIM_VMM, 1, 0, 0},
        {"sim streams control-file", VMEM_BACKEND_SIM, 1, 1, 0},
        {"sim-vmm control-file", VMEM_BACKEND_SIM_VMM, 0, 1, 0},
        {"sim-vmm tags paused", VMEM_BACKEND_SIM_VMM, 0, 0, 1},
    };
    unsigned failed = 0;
    for (int r = 0; r < repeat; r++) {
        for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
            stress_opts_t o = {.backend = runs[i].backend, .streams = runs[i].streams,
                               .control_file = runs[i].control_file, .tags = runs[i].tags,
                               .workers = workers,
                               .ops = ops};
            char why[256] = "";
            unsigned bad = stress_run(&o, why, sizeof why);
            printf("stress %-26s %d workers x %d ops: %s%s\n", runs[i].name, workers, ops,
                   bad ? "FAIL: " : (why[0] ? "" : "ok"), why);
            failed += bad != 0;
        }
    }
    return failed ? 1 : 0;
}
