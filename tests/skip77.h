/*
 * For Criterion suites that may have nothing to run on a machine (the GPU
 * suites without a GPU): a main() that exits 77 when every test skipped, so
 * that meson reports SKIP rather than a pass.  Include it in exactly one
 * source file of the test binary, after criterion.h.  Otherwise it behaves as
 * Criterion's own main: 0 when all tests passed, 1 when one failed.
 */
#ifndef VMEM_TESTS_SKIP77_H
#define VMEM_TESTS_SKIP77_H

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdio.h>

static size_t skip77_tests, skip77_skipped;

/* Runs in the runner process once every test has reported. */
ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    skip77_tests = stats->nb_tests;
    skip77_skipped = stats->tests_skipped;
}

int main(int argc, char *argv[])
{
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true))
        result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    if (result == 0 && skip77_tests > 0 && skip77_skipped == skip77_tests) {
        fprintf(stderr, "all %zu tests skipped: exit 77 (skipped)\n", skip77_tests);
        return 77;
    }
    return result;
}

#endif
