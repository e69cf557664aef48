/* Suite 'control': perf pacing at vmem_step_end.  perf P makes the job's
 * share of wall time about P%; perf 0 suspends it at the step boundary
 * until the value changes; vmem_destroy ends a suspension.
 *
 * These are functional checks of pacing, not benchmarks: the bands are wide
 * enough to hold on a loaded 2-core machine (sleeps overshoot there, which
 * only lowers the measured share a little, since the library measures the
 * step it paces). */
#include "common.h"

/* Runs n steps of ~step_ms of "work" (sleep) and returns the share of the
 * wall time spent working. */
static double share_measure(vmem_t *v, int n, long step_ms)
{
    cr_assert_eq(vmem_step_end(v), VMEM_OK); /* start a step from here */
    double work = 0, t0 = now_s();
    for (int i = 0; i < n; i++) {
        double a = now_s();
        void *p = vmem_alloc(v, 1 * MiB);
        sleep_ms(step_ms);
        vmem_free(v, p);
        work += now_s() - a;
        cr_assert_eq(vmem_step_end(v), VMEM_OK);
    }
    return work / (now_s() - t0);
}

static vmem_t *paced(const char *ctl, int perf)
{
    char text[64];
    snprintf(text, sizeof text, "{\"perf\": %d}", perf);
    file_put_atomic(ctl, text);
    vmem_t *v = instance_make(256 * MiB, ctl, NULL, NULL, 0);
    cr_assert_eq(atomic_load(&v->perf), perf);
    return v;
}

Test(control_perf, perf_50_halves_the_time_share, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    vmem_t *v = paced(ctl, 50);
    double share = share_measure(v, 12, 20);
    cr_assert(share > 0.30 && share < 0.70, "perf 50: measured share %.3f, want ~0.5", share);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

Test(control_perf, perf_25_quarters_the_time_share, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    vmem_t *v = paced(ctl, 25);
    double share = share_measure(v, 8, 20);
    cr_assert(share > 0.12 && share < 0.40, "perf 25: measured share %.3f, want ~0.25", share);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

Test(control_perf, perf_100_does_not_pace, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    vmem_t *v = paced(ctl, 100);
    double share = share_measure(v, 12, 20);
    cr_assert(share > 0.75, "perf 100: measured share %.3f, want ~1", share);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

Test(control_perf, perf_change_takes_effect_at_step_ends, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    vmem_t *v = paced(ctl, 100);
    file_put_atomic(ctl, "{\"perf\": 50}");
    cr_assert(WAIT_FOR(status_of(v).perf == 50));
    double share = share_measure(v, 10, 20);
    cr_assert(share > 0.30 && share < 0.70, "perf 50: measured share %.3f", share);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

/* ------------------------------------------------------------------------ */
/* perf 0                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct stepper {
    vmem_t *v;
    atomic_int done;
    vmem_status_t st;
} stepper_t;

static void *stepper_main(void *arg)
{
    stepper_t *s = arg;
    s->st = vmem_step_end(s->v);
    atomic_store(&s->done, 1);
    return NULL;
}

Test(control_perf, perf_0_suspends_until_the_value_changes, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    vmem_t *v = paced(ctl, 100);
    file_put_atomic(ctl, "{\"perf\": 0}");
    cr_assert(WAIT_FOR(atomic_load(&v->perf) == 0));

    stepper_t s = {.v = v};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, stepper_main, &s), 0);
    cr_assert(WAIT_FOR(status_of(v).suspended == 1), "the step end did not suspend");
    sleep_ms(300);
    cr_assert_not(atomic_load(&s.done), "perf 0 let the step end return");
    /* other threads keep working while the job is suspended */
    void *p = vmem_alloc(v, 1 * MiB);
    cr_assert_not_null(p);
    vmem_free(v, p);

    /* resuming: a limit change in the same file applies as the job leaves
     * the boundary */
    file_put_atomic(ctl, "{\"perf\": 100, \"limit\": \"128M\"}");
    cr_assert(WAIT_FOR(atomic_load(&s.done)), "the suspended step end never resumed");
    pthread_join(t, NULL);
    cr_assert_eq(s.st, VMEM_OK);
    cr_assert_eq(status_of(v).suspended, 0);
    cr_assert_eq(limit_of(v), 128 * MiB);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

Test(control_perf, destroy_ends_a_suspension, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    vmem_t *v = paced(ctl, 0);
    stepper_t s = {.v = v};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, stepper_main, &s), 0);
    cr_assert(WAIT_FOR(status_of(v).suspended == 1));
    vmem_destroy(v);
    pthread_join(t, NULL);
    cr_assert_eq(s.st, VMEM_ERR_BUSY);
    free(ctl);
    dir_remove(dir);
}

Test(control_perf, destroy_ends_a_pacing_sleep, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    vmem_t *v = paced(ctl, 1); /* sleeps 99 step lengths */
    sleep_ms(200);             /* a 200 ms step: ~20 s of pacing */
    stepper_t s = {.v = v};
    pthread_t t;
    double t0 = now_s();
    cr_assert_eq(pthread_create(&t, NULL, stepper_main, &s), 0);
    sleep_ms(100);
    cr_assert_not(atomic_load(&s.done));
    vmem_destroy(v);
    pthread_join(t, NULL);
    cr_assert_eq(s.st, VMEM_ERR_BUSY);
    cr_assert_lt(now_s() - t0, 15.0, "destroy did not cut the pacing sleep short");
    free(ctl);
    dir_remove(dir);
}
