/*
 * Concurrency stress (suite 'stress'): see stress.c.  The same runs are
 * made under ThreadSanitizer by stress_main.c (scripts/sanitize.sh tsan).
 */
#include <criterion/criterion.h>
#include <string.h>

#include "stress.h"

static void run_tags(vmem_backend_kind_t backend, int streams, int control_file, int tags)
{
    stress_opts_t o = {.backend = backend, .streams = streams, .control_file = control_file,
                       .tags = tags, .workers = 4, .ops = 6000};
    char why[256] = "";
    unsigned bad = stress_run(&o, why, sizeof why);
    if (!bad && !strncmp(why, "skipped", 7))
        cr_skip_test("%s", why);
    cr_assert_eq(bad, 0, "%u failed checks; first: %s", bad, why);
}

static void run(vmem_backend_kind_t backend, int streams, int control_file)
{
    run_tags(backend, streams, control_file, 0);
}

Test(stress, sim) { run(VMEM_BACKEND_SIM, 0, 0); }
Test(stress, sim_vmm) { run(VMEM_BACKEND_SIM_VMM, 0, 0); }
Test(stress, sim_vmm_streams) { run(VMEM_BACKEND_SIM_VMM, 1, 0); }
Test(stress, sim_streams_control_file) { run(VMEM_BACKEND_SIM, 1, 1); }
Test(stress, sim_vmm_control_file) { run(VMEM_BACKEND_SIM_VMM, 0, 1); }
/* Two workers' tags paused (keep or discard) and resumed under the others. */
Test(stress, sim_vmm_tags_paused_and_resumed) { run_tags(VMEM_BACKEND_SIM_VMM, 0, 0, 1); }
