/* Suite 'control': the control file changes the running instance — at the
 * next vmem_step_end (and not before), or at once when asked; the per-GPU
 * form; the start cap; the file as it is at start. */
#include "common.h"

/* ------------------------------------------------------------------------ */
/* Allocating threads                                                       */
/* ------------------------------------------------------------------------ */

typedef struct churn {
    vmem_t *v;
    atomic_int *stop;
    unsigned seed;
    uint64_t ops;
} churn_t;

/* Allocates and frees blocks of 1-8 MiB, keeping up to 16 live. */
static void *churn_main(void *arg)
{
    churn_t *c = arg;
    void *live[16] = {0};
    while (!atomic_load(c->stop)) {
        int i = (int)(rand_r(&c->seed) % 16);
        if (live[i]) {
            cr_assert_eq(vmem_free(c->v, live[i]), VMEM_OK);
            live[i] = NULL;
        } else {
            live[i] = vmem_alloc(c->v, (1 + rand_r(&c->seed) % 8) * MiB);
        }
        c->ops++;
    }
    for (int i = 0; i < 16; i++)
        if (live[i])
            cr_assert_eq(vmem_free(c->v, live[i]), VMEM_OK);
    return NULL;
}

#define NCHURN 3

Test(control, limit_lowered_while_allocating_applies_at_next_step_end, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    logcount_t lc;
    logcount_init(&lc);
    vmem_t *v = instance_make(1 * GiB, ctl, NULL, &lc, 0);
    cr_assert(status_of(v).active);

    atomic_int stop = 0;
    churn_t c[NCHURN];
    pthread_t t[NCHURN];
    for (int i = 0; i < NCHURN; i++) {
        c[i] = (churn_t){v, &stop, 17u + (unsigned)i, 0};
        cr_assert_eq(pthread_create(&t[i], NULL, churn_main, &c[i]), 0);
    }
    for (int s = 0; s < 5; s++) {
        sleep_ms(5);
        cr_assert_eq(vmem_step_end(v), VMEM_OK);
    }

    file_put_atomic(ctl, "{\"limit\": \"256M\"}");
    cr_assert(wait_file_limit(v, 256 * MiB), "the watcher never read the new limit");
    cr_assert(status_of(v).pending);
    /* Seen, but not in force before the step ends, however long we wait. */
    sleep_ms(150);
    cr_assert_eq(limit_of(v), 1 * GiB, "a control change was applied before the step end");

    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    cr_assert_eq(limit_of(v), 256 * MiB, "the change was not applied at the step end");
    cr_assert_not(status_of(v).pending);

    /* Further steps while the threads keep allocating: the arena converges
     * to the new limit as blocks are freed. */
    for (int s = 0; s < 20; s++) {
        sleep_ms(5);
        vmem_step_end(v);
    }
    atomic_store(&stop, 1);
    uint64_t ops = 0;
    for (int i = 0; i < NCHURN; i++) {
        pthread_join(t[i], NULL);
        ops += c[i].ops;
    }
    cr_assert_gt(ops, 0);
    vmem_stats_t s = {.size = sizeof s};
    cr_assert_eq(vmem_get_stats(v, &s), VMEM_OK);
    cr_assert_eq(s.limit, 256 * MiB);
    cr_assert_leq(s.device_held, 256 * MiB, "device holds %zu above the new limit", s.device_held);
    cr_assert_eq(s.pending_limit, 0);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    cr_assert_eq(atomic_load(&lc.errors), 0, "unexpected error: %s", lc.last_error);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

Test(control, immediate_mode_applies_without_a_step_end, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    vmem_t *v = instance_make(1 * GiB, ctl, NULL, NULL, 1);
    file_put_atomic(ctl, "{\"limit\": 134217728}");
    cr_assert(WAIT_FOR(limit_of(v) == 128 * MiB), "immediate change never applied");
    cr_assert_not(status_of(v).pending);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

Test(control, file_present_at_create_is_applied_at_once, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    file_put_atomic(ctl, "{\"limit\": \"512M\", \"host_limit\": \"1G\", \"host_fallback\": false,"
                         " \"perf\": 100}");
    vmem_t *v = instance_make(1 * GiB, ctl, NULL, NULL, 0);
    vmem_stats_t s = {.size = sizeof s};
    cr_assert_eq(vmem_get_stats(v, &s), VMEM_OK);
    cr_assert_eq(s.limit, 512 * MiB);
    cr_assert_eq(s.start_cap, 1 * GiB, "the file must not move the start cap");
    cr_assert_eq(s.host_limit, 1 * GiB);
    cr_assert_eq(s.host_fallback, 0);
    cr_assert_eq(s.perf, 100);
    /* host_fallback false: what does not fit fails instead of spilling */
    void *p = vmem_alloc(v, 600 * MiB);
    cr_assert_null(p);
    cr_assert_eq(vmem_last_status(), VMEM_ERR_NOMEM);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

Test(control, host_keys_change_at_step_end, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    vmem_t *v = instance_make(256 * MiB, ctl, NULL, NULL, 0);
    file_put_atomic(ctl, "{\"host_fallback\": false, \"host_limit\": 536870912}");
    cr_assert(WAIT_FOR(status_of(v).pending));
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    cr_assert_eq(s.host_fallback, 1);
    vmem_step_end(v);
    vmem_get_stats(v, &s);
    cr_assert_eq(s.host_fallback, 0);
    cr_assert_eq(s.host_limit, 512 * MiB);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

Test(control, raise_above_start_cap_is_clamped_with_a_warning, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    logcount_t lc;
    logcount_init(&lc);
    vmem_t *v = instance_make(1 * GiB, ctl, NULL, &lc, 0);
    file_put_atomic(ctl, "{\"limit\": \"256M\"}");
    cr_assert(wait_file_limit(v, 256 * MiB));
    vmem_step_end(v);
    cr_assert_eq(limit_of(v), 256 * MiB);

    file_put_atomic(ctl, "{\"limit\": \"4G\"}");
    cr_assert(wait_file_limit(v, 4 * GiB));
    vmem_step_end(v);
    cr_assert_eq(limit_of(v), 1 * GiB, "raise must stop at the start cap");
    cr_assert(logcount_has(&lc, "above the start cap"), "no warning about the cap:\n%s", lc.all);
    cr_assert_eq(atomic_load(&lc.errors), 0, "unexpected error: %s", lc.last_error);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

Test(control, only_changed_keys_are_applied, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    file_put_atomic(ctl, "{\"limit\": \"512M\", \"perf\": 100}");
    vmem_t *v = instance_make(1 * GiB, ctl, NULL, NULL, 0);
    cr_assert_eq(limit_of(v), 512 * MiB);
    /* the embedder moves the limit itself; a file change that leaves
     * "limit" alone must not undo that */
    cr_assert_eq(vmem_set_limit(v, 700 * MiB, NULL), VMEM_OK);
    file_put_atomic(ctl, "{\"limit\": \"512M\", \"perf\": 99}");
    cr_assert(WAIT_FOR(status_of(v).perf == 99));
    vmem_step_end(v);
    cr_assert_eq(limit_of(v), 700 * MiB);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

/* ------------------------------------------------------------------------ */
/* AntMan's per-GPU form                                                    */
/* ------------------------------------------------------------------------ */

Test(control, per_gpu_entry_for_this_device_wins, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    vmem_t *v = instance_make(1 * GiB, ctl, NULL, NULL, 0);
    file_put_atomic(ctl, "{\"limit\": \"900M\","
                         " \"0000:3b:00.0\": {\"mem_limit\": 1048576},"
                         " \"sim:0\": {\"mem_limit\": 268435456}}");
    cr_assert(wait_file_limit(v, 256 * MiB), "the sim:0 entry was not read");
    vmem_step_end(v);
    cr_assert_eq(limit_of(v), 256 * MiB);

    /* an entry for another GPU only: nothing for this instance */
    uint64_t good = status_of(v).good;
    file_put_atomic(ctl, "{\"0000:3b:00.0\": {\"mem_limit\": 1048576}}");
    cr_assert(WAIT_FOR(status_of(v).good > good));
    vmem_step_end(v);
    cr_assert_eq(limit_of(v), 256 * MiB);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

Test(control, per_gpu_entry_follows_the_device_ordinal, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    file_put_atomic(ctl, "{\"sim:0\": {\"mem_limit\": \"100M\"}, \"SIM:1\": {\"limit\": \"200M\","
                         " \"perf\": 100}}");
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = VMEM_BACKEND_SIM;
    cfg.limit = 1 * GiB;
    cfg.sim_capacity = 4 * GiB;
    cfg.device = 1;
    cfg.control_file = ctl;
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_OK);
    cr_assert_eq(limit_of(v), 200 * MiB, "device 1 must read the \"sim:1\" entry");
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

Test(control, bad_value_in_this_devices_entry_is_an_error, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    logcount_t lc;
    logcount_init(&lc);
    file_put_atomic(ctl, "{\"sim:0\": {\"mem_limit\": \"lots\"}, \"0000:3b:00.0\": 7}");
    vmem_t *v = instance_make(1 * GiB, ctl, NULL, &lc, 0);
    cr_assert_eq(atomic_load(&lc.errors), 1);
    cr_assert(logcount_has(&lc, "sim:0"), "the error must name the entry:\n%s", lc.all);
    cr_assert_eq(limit_of(v), 1 * GiB);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

/* ------------------------------------------------------------------------ */
/* Watcher lifetime                                                         */
/* ------------------------------------------------------------------------ */

Test(control, many_instances_start_and_stop, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    file_put_atomic(ctl, "{\"limit\": \"64M\"}");
    for (int i = 0; i < 50; i++) {
        vmem_t *v = instance_make(1 * GiB, ctl, NULL, NULL, i & 1);
        cr_assert_eq(limit_of(v), 64 * MiB);
        vmem_destroy(v);
    }
    free(ctl);
    dir_remove(dir);
}

Test(control, relative_path_and_missing_directory, .timeout = 30)
{
    char *dir = dir_make();
    cr_assert_eq(chdir(dir), 0);
    /* relative: resolved against the working directory at create */
    vmem_t *v = instance_make(1 * GiB, "rel.json", NULL, NULL, 0);
    cr_assert_eq(chdir("/"), 0);
    char *ctl = path_join(dir, "rel.json");
    file_put_atomic(ctl, "{\"limit\": \"32M\"}");
    cr_assert(wait_file_limit(v, 32 * MiB));
    vmem_destroy(v);

    /* a directory that does not exist yet: polled until it does */
    char *sub = path_join(dir, "later");
    char *ctl2 = path_join(sub, "c.json");
    logcount_t lc;
    logcount_init(&lc);
    v = instance_make(1 * GiB, ctl2, NULL, &lc, 0);
    cr_assert_not(status_of(v).inotify);
    cr_assert_eq(mkdir(sub, 0755), 0);
    file_put_atomic(ctl2, "{\"limit\": \"48M\"}");
    cr_assert(wait_file_limit(v, 48 * MiB));
    vmem_step_end(v);
    cr_assert_eq(limit_of(v), 48 * MiB);
    vmem_destroy(v);
    unlink(ctl2);
    rmdir(sub);
    free(ctl);
    free(ctl2);
    free(sub);
    dir_remove(dir);
}

/* ------------------------------------------------------------------------ */
/* Callbacks                                                                */
/* ------------------------------------------------------------------------ */

typedef struct limit_events {
    atomic_int count;
    size_t old_limit, new_limit;
    pthread_t thread;
} limit_events_t;

static void on_limit(void *ctx, const vmem_event_t *ev)
{
    limit_events_t *e = ctx;
    cr_assert_eq(ev->kind, VMEM_EVENT_LIMIT_CHANGED);
    e->old_limit = ev->old_limit;
    e->new_limit = ev->new_limit;
    e->thread = pthread_self();
    atomic_fetch_add(&e->count, 1);
}

Test(control, limit_change_from_the_file_fires_the_callback, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    for (int immediate = 0; immediate < 2; immediate++) {
        vmem_t *v = instance_make(1 * GiB, ctl, NULL, NULL, immediate);
        limit_events_t e = {0};
        cr_assert_eq(vmem_set_callback(v, VMEM_EVENT_LIMIT_CHANGED, on_limit, &e), VMEM_OK);
        size_t want = immediate ? 300 * MiB : 200 * MiB;
        char text[64];
        snprintf(text, sizeof text, "{\"limit\": %zu}", want);
        file_put_atomic(ctl, text);
        cr_assert(wait_file_limit(v, want));
        if (!immediate) {
            cr_assert_eq(atomic_load(&e.count), 0, "fired before the step end");
            vmem_step_end(v);
            cr_assert_eq(atomic_load(&e.count), 1);
            cr_assert(pthread_equal(e.thread, pthread_self()), "not on the step-end thread");
        } else {
            cr_assert(WAIT_FOR(atomic_load(&e.count) == 1));
            cr_assert_not(pthread_equal(e.thread, pthread_self()), "not on the watcher");
        }
        cr_assert_eq(e.new_limit, want);
        vmem_destroy(v);
        unlink(ctl);
    }
    free(ctl);
    dir_remove(dir);
}

Test(control, bus_ids_compare_by_value)
{
    const char *cuda = "0000:3b:00.0";
    cr_assert(control_bus_id_match("0000:3b:00.0", cuda));
    cr_assert(control_bus_id_match("00000000:3B:00.0", cuda), "nvidia-smi spelling");
    cr_assert(control_bus_id_match("3b:00.0", cuda), "short spelling, domain 0");
    cr_assert(control_bus_id_match("0000:3B:00.0", "00000000:3b:00.0"));
    cr_assert_not(control_bus_id_match("0000:3b:00.1", cuda), "function differs");
    cr_assert_not(control_bus_id_match("0001:3b:00.0", cuda), "domain differs");
    cr_assert_not(control_bus_id_match("0000:af:00.0", cuda));
    cr_assert_not(control_bus_id_match("sim:0", cuda));
    cr_assert_not(control_bus_id_match("0000:3b:00.0x", cuda), "trailing text");
    cr_assert(control_bus_id_match("SIM:0", "sim:0"));
    cr_assert_not(control_bus_id_match("sim:1", "sim:0"));
    cr_assert_not(control_bus_id_match("0000:3b:00.0", ""), "unknown device id matches nothing");
}
