/* libvmem statistics in the Prometheus text exposition format (version
 * 0.0.4): what `vmemctl stats --prometheus` prints and writes for
 * node-exporter's textfile collector.  See docs/kubernetes.md#metrics. */
#ifndef VMEM_PROM_H
#define VMEM_PROM_H

#include <stddef.h>

/* One statistics file to render.
 * json: its text (a libvmem statistics object), or NULL when it could not be
 * read (then only vmem_stats_file_ok 0 is rendered for it);
 * job: the value of the label job (NULL: no job label);
 * device: the value of the label device (NULL: the file's "device" key;
 * no label when that is absent too). */
typedef struct prom_source {
    const char *json;
    const char *job;
    const char *device;
} prom_source_t;

/* Renders n sources, each metric family once (# HELP, # TYPE, then one
 * sample per source that has the value).  Returns a malloc'd NUL-terminated
 * text, or NULL with err filled: a source whose json is not a JSON object,
 * or no memory.  Thread-safe (no shared state). */
char *prom_render(const prom_source_t *src, size_t n, char *err, size_t errlen);

/* Replaces path with text atomically: a temporary file in the same
 * directory (its name does not end in ".prom", so the textfile collector
 * never reads it half written), then rename.  Returns 0, or -1 with err
 * filled (the temporary file is removed). */
int prom_write_file(const char *path, const char *text, char *err, size_t errlen);

/* `vmemctl stats --prometheus [--job NAME] [--device LABEL] [--output FILE]
 * STATS_FILE...`: argv holds the arguments after "stats".  Returns the exit
 * status: 0, 1 (a file unreadable or malformed, or the output not written;
 * the readable ones are still rendered), 2 (bad arguments). */
int prom_cli(int argc, char **argv);

#endif
