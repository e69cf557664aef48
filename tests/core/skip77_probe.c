/* A suite whose tests all skip: with tests/skip77.h the binary must exit 77
 * (test core-skip77), as the GPU suites do on a machine without a GPU.
   A disabled test counts as skipped too. */
#include <criterion/criterion.h>

#include "../skip77.h"

Test(probe, skips_a)
{
    cr_skip_test("nothing to run here");
}

Test(probe, skips_b)
{
    cr_skip_test("nothing to run here");
}

Test(probe, disabled_case, .disabled = 1)
{
    cr_assert(1);
}
