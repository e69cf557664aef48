/* Suite 'control': every way the control file can be wrong.  Each case logs
 * exactly one error, keeps the last good setting through step ends, does
 * not log again while the same bad content is re-read, and is left as soon
 * as a good file appears.  Every case runs twice: with inotify and with the
 * polling fallback. */
#include "common.h"

typedef struct fixture {
    char *dir, *ctl;
    logcount_t lc;
    vmem_t *v;
} fixture_t;

/* An instance that has applied {"limit": "512M"} from its control file. */
static void fixture_open(fixture_t *f, int poll)
{
    control_force_poll = poll;
    f->dir = dir_make();
    f->ctl = path_join(f->dir, "control.json");
    logcount_init(&f->lc);
    file_put_atomic(f->ctl, "{\"limit\": \"512M\"}");
    f->v = instance_make(1 * GiB, f->ctl, NULL, &f->lc, 0);
    cr_assert_eq(status_of(f->v).inotify, !poll);
    cr_assert_eq(limit_of(f->v), 512 * MiB);
    cr_assert_eq(atomic_load(&f->lc.errors), 0);
}

static void fixture_close(fixture_t *f)
{
    cr_assert_eq(vmem_check(f->v), VMEM_OK);
    vmem_destroy(f->v);
    free(f->ctl);
    dir_remove(f->dir);
}

/* The bad state just written must produce one error (and only one, however
 * often it is seen), and step ends must keep the 512M limit. */
static void expect_one_error(fixture_t *f, uint64_t errors_before, const char *what)
{
    cr_assert(WAIT_FOR(status_of(f->v).errors == errors_before + 1), "%s: no error logged", what);
    cr_assert(status_of(f->v).in_error);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(vmem_step_end(f->v), VMEM_OK);
    cr_assert_eq(limit_of(f->v), 512 * MiB, "%s: the last good setting was not kept", what);
    /* more events on the same bad state: re-read, never re-logged */
    uint64_t reads = status_of(f->v).reads;
    struct timespec ts[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
    for (int i = 0; i < 3; i++) {
        utimensat(AT_FDCWD, f->ctl, ts, 0); /* touch (no-op if deleted) */
        sleep_ms(60);
    }
    if (access(f->ctl, F_OK) == 0)
        cr_assert(WAIT_FOR(status_of(f->v).reads > reads), "%s: touch not seen", what);
    sleep_ms(250); /* let the polling watcher look at it a few more times */
    cr_assert_eq(status_of(f->v).errors, errors_before + 1, "%s: logged more than once", what);
    cr_assert_eq((uint64_t)atomic_load(&f->lc.errors), errors_before + 1,
                 "%s: log lines and counter disagree; last: %s", what, f->lc.last_error);
    cr_assert(strstr(f->lc.last_error, "control file") != NULL);
    cr_assert(strstr(f->lc.last_error, "keeping the last good setting") != NULL, "%s",
              f->lc.last_error);
}

/* A good file must be picked up again and applied at the next step end. */
static void expect_recovery(fixture_t *f, size_t bytes)
{
    cr_assert(wait_file_limit(f->v, bytes), "recovery not seen");
    cr_assert_not(status_of(f->v).in_error);
    cr_assert_eq(vmem_step_end(f->v), VMEM_OK);
    cr_assert_eq(limit_of(f->v), bytes);
}

static void case_garbage(int poll)
{
    fixture_t f;
    fixture_open(&f, poll);
    file_put_atomic(f.ctl, "this is not JSON {{{");
    expect_one_error(&f, 0, "garbage");
    cr_assert(strstr(f.lc.last_error, "not valid JSON") != NULL, "%s", f.lc.last_error);
    /* a different bad content is a new error */
    file_put_atomic(f.ctl, "[1, 2, 3]");
    expect_one_error(&f, 1, "array");
    file_put_atomic(f.ctl, "{\"limit\": 268435456}");
    expect_recovery(&f, 256 * MiB);
    fixture_close(&f);
}
Test(control_malformed, garbage_inotify, .timeout = 30) { case_garbage(0); }
Test(control_malformed, garbage_polling, .timeout = 30) { case_garbage(1); }

static void case_partial(int poll)
{
    fixture_t f;
    fixture_open(&f, poll);
    /* written in place and left half done: the writer stalled or died */
    file_put_inplace(f.ctl, "{\"limit\": \"256M\", \"perf\": 10");
    expect_one_error(&f, 0, "partial");
    cr_assert_eq(atomic_load(&f.v->perf), 100, "perf from a partial file was applied");
    /* the writer finishes, still in place */
    file_put_inplace(f.ctl, "{\"limit\": \"256M\", \"perf\": 100}");
    expect_recovery(&f, 256 * MiB);
    fixture_close(&f);
}
Test(control_malformed, partial_inotify, .timeout = 30) { case_partial(0); }
Test(control_malformed, partial_polling, .timeout = 30) { case_partial(1); }

static void case_empty(int poll)
{
    fixture_t f;
    fixture_open(&f, poll);
    file_put_inplace(f.ctl, "");
    expect_one_error(&f, 0, "empty");
    cr_assert(strstr(f.lc.last_error, "empty") != NULL, "%s", f.lc.last_error);
    file_put_inplace(f.ctl, " \n\t ");
    /* whitespace only is empty too; new content, so a new error */
    cr_assert(WAIT_FOR(status_of(f.v).errors == 2));
    cr_assert_eq(atomic_load(&f.lc.errors), 2);
    file_put_inplace(f.ctl, "{\"limit\": \"128M\"}");
    expect_recovery(&f, 128 * MiB);
    fixture_close(&f);
}
Test(control_malformed, empty_inotify, .timeout = 30) { case_empty(0); }
Test(control_malformed, empty_polling, .timeout = 30) { case_empty(1); }

static void case_deleted_then_recreated(int poll)
{
    fixture_t f;
    fixture_open(&f, poll);
    cr_assert_eq(unlink(f.ctl), 0);
    expect_one_error(&f, 0, "deleted");
    cr_assert(strstr(f.lc.last_error, "deleted") != NULL, "%s", f.lc.last_error);
    /* created again later, in place */
    file_put_inplace(f.ctl, "{\"limit\": \"64M\"}");
    expect_recovery(&f, 64 * MiB);
    fixture_close(&f);
}
Test(control_malformed, deleted_then_recreated_inotify, .timeout = 30)
{
    case_deleted_then_recreated(0);
}
Test(control_malformed, deleted_then_recreated_polling, .timeout = 30)
{
    case_deleted_then_recreated(1);
}

static void case_bad_values(int poll)
{
    static const char *bad[] = {
        "{\"limit\": \"lots\"}",
        "{\"limit\": -5}",
        "{\"limit\": 1.5}",
        "{\"limit\": true}",
        "{\"host_limit\": \"12Q\"}",
        "{\"host_fallback\": \"maybe\"}",
        "{\"perf\": 101}",
        "{\"perf\": -1}",
        "{\"perf\": 50.5}",
        "{\"perf\": \"50\"}",
        "{\"limit\": \"256M\"} trailing",
        "{\"limit\": \"256M\",}",
        "{\"sim:0\": [1]}",
        "\"just a string\"",
        /* an escaped NUL ended the string for cJSON: "256M" and "limit" were read */
        "{\"limit\": \"256M\\u0000junk\"}",
        "{\"limit\\u0000junk\": \"256M\"}",
    };
    fixture_t f;
    fixture_open(&f, poll);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        file_put_atomic(f.ctl, bad[i]);
        cr_assert(WAIT_FOR(status_of(f.v).errors == i + 1), "not rejected: %s", bad[i]);
        vmem_step_end(f.v);
        cr_assert_eq(limit_of(f.v), 512 * MiB, "applied: %s", bad[i]);
        cr_assert_eq(atomic_load(&f.v->perf), 100, "perf applied: %s", bad[i]);
    }
    cr_assert_eq((size_t)atomic_load(&f.lc.errors), sizeof bad / sizeof bad[0]);
    file_put_atomic(f.ctl, "{\"limit\": \"256M\", \"comment\": \"unknown keys are ignored\"}");
    expect_recovery(&f, 256 * MiB);
    fixture_close(&f);
}
Test(control_malformed, bad_values_inotify, .timeout = 30) { case_bad_values(0); }
Test(control_malformed, bad_values_polling, .timeout = 30) { case_bad_values(1); }

static void case_replaced_by_rename(int poll)
{
    fixture_t f;
    fixture_open(&f, poll);
    /* a file prepared elsewhere in the directory, moved over the control file */
    char *other = path_join(f.dir, "prepared.json");
    file_put_inplace(other, "{\"limit\": \"320M\"}");
    sleep_ms(100);
    cr_assert_eq(limit_of(f.v), 512 * MiB);
    cr_assert_eq(rename(other, f.ctl), 0);
    expect_recovery(&f, 320 * MiB);
    /* bad content arriving by rename is an error like any other */
    file_put_atomic(f.ctl, "{");
    cr_assert(WAIT_FOR(status_of(f.v).errors == 1));
    vmem_step_end(f.v);
    cr_assert_eq(limit_of(f.v), 320 * MiB);
    free(other);
    fixture_close(&f);
}
Test(control_malformed, replaced_by_rename_inotify, .timeout = 30) { case_replaced_by_rename(0); }
Test(control_malformed, replaced_by_rename_polling, .timeout = 30) { case_replaced_by_rename(1); }

Test(control_malformed, missing_at_start_is_not_an_error, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    logcount_t lc;
    logcount_init(&lc);
    vmem_t *v = instance_make(1 * GiB, ctl, NULL, &lc, 0);
    sleep_ms(100);
    cr_assert_eq(atomic_load(&lc.errors), 0);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    cr_assert_eq(limit_of(v), 1 * GiB);
    file_put_atomic(ctl, "{\"limit\": \"100M\"}");
    cr_assert(wait_file_limit(v, 100 * MiB));
    vmem_step_end(v);
    cr_assert_eq(limit_of(v), 100 * MiB);
    cr_assert_eq(atomic_load(&lc.errors), 0);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

Test(control_malformed, bad_file_at_start_keeps_the_configuration, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    logcount_t lc;
    logcount_init(&lc);
    file_put_atomic(ctl, "{\"limit\": ");
    vmem_t *v = instance_make(1 * GiB, ctl, NULL, &lc, 0);
    cr_assert_eq(atomic_load(&lc.errors), 1);
    cr_assert(strstr(lc.last_error, "nothing applied from it yet") != NULL, "%s", lc.last_error);
    cr_assert_eq(limit_of(v), 1 * GiB);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

/* While an error line is being logged, the state readers see is still the
 * one before it: nobody reads the error state with a count that does not
 * include it.  The log function reads the status from the watcher thread,
 * at the moment the line is written (the old order set the state first and
 * counted after the line: this saw in_error with 0 errors). */
static vmem_t *seen_v;
static atomic_int seen_lines, seen_torn;
static void seen_log(void *ctx, vmem_log_level_t level, const char *msg)
{
    (void)ctx;
    if (level < VMEM_LOG_ERROR || !strstr(msg, "control file") || !seen_v)
        return;
    control_status_t cs;
    if (control_get_status(seen_v, &cs) != VMEM_OK)
        return;
    atomic_fetch_add(&seen_lines, 1);
    if (cs.in_error && cs.errors < (uint64_t)atomic_load(&seen_lines))
        atomic_fetch_add(&seen_torn, 1);
}

Test(control_malformed, the_error_state_is_never_seen_without_its_count, .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    file_put_atomic(ctl, "{\"limit\": \"512M\"}");
    vmem_t *v = instance_make_log(1 * GiB, ctl, NULL, seen_log, NULL, 0);
    seen_v = v;
    const char *bad[] = {"{oops", "{\"limit\": -1}", "[]", "{\"limit\": \"lots\"}"};
    for (int i = 0; i < 4; i++) {
        file_put_atomic(ctl, bad[i]);
        cr_assert(WAIT_FOR(status_of(v).errors == (uint64_t)i + 1), "case %d not counted", i);
        cr_assert(status_of(v).in_error);
        file_put_atomic(ctl, "{\"limit\": \"512M\"}");
        cr_assert(WAIT_FOR(!status_of(v).in_error), "case %d: the good file not seen", i);
    }
    cr_assert_eq(atomic_load(&seen_lines), 4);
    cr_assert_eq(atomic_load(&seen_torn), 0, "the error state was readable before its count");
    seen_v = NULL;
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

/* The limit is on the file's size: exactly 1 MiB (1048576 bytes) is read,
 * one byte more is refused with "larger than 1048576 bytes". */
static void case_size_limit(int poll)
{
    fixture_t f;
    fixture_open(&f, poll);
    size_t n = (size_t)1 << 20;
    char *text = malloc(n + 2);
    cr_assert_not_null(text);
    const char *json = "{\"limit\": \"256M\"}";
    memset(text, ' ', n + 1);
    memcpy(text, json, strlen(json));
    text[n] = '\0';
    file_put_atomic(f.ctl, text); /* exactly 1048576 bytes */
    cr_assert(wait_file_limit(f.v, 256 * MiB), "a file of exactly 1048576 bytes was refused: %s",
              f.lc.last_error);
    cr_assert_eq(atomic_load(&f.lc.errors), 0, "%s", f.lc.last_error);
    cr_assert_eq(vmem_step_end(f.v), VMEM_OK);
    cr_assert_eq(limit_of(f.v), 256 * MiB);
    text[n] = ' ';
    text[n + 1] = '\0';
    memcpy(text, "{\"limit\": \"128M\"}", strlen(json));
    file_put_atomic(f.ctl, text); /* 1048577 bytes */
    cr_assert(WAIT_FOR(status_of(f.v).errors == 1), "a file of 1048577 bytes was not refused");
    cr_assert(strstr(f.lc.last_error, "larger than 1048576 bytes") != NULL, "%s",
              f.lc.last_error);
    cr_assert_eq(vmem_step_end(f.v), VMEM_OK);
    cr_assert_eq(limit_of(f.v), 256 * MiB, "the refused file was applied");
    free(text);
    file_put_atomic(f.ctl, "{\"limit\": \"64M\"}");
    expect_recovery(&f, 64 * MiB);
    fixture_close(&f);
}
Test(control_malformed, size_limit_inotify, .timeout = 30) { case_size_limit(0); }
Test(control_malformed, size_limit_polling, .timeout = 30) { case_size_limit(1); }
