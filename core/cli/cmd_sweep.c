/* qlab sweep: expand a sweep file into configs (--list); running them lands
 * with the evaluation pipeline. */
#include <stdio.h>
#include <string.h>

#include "../sweep.h"
#include "cli.h"
#include "commands.h"

static void help(void)
{
    printf("usage: qlab sweep FILE --list [--shard K/N|auto]\n"
           "\n"
           "Reads a sweep file (experiments/*.sweep), checks it and expands its [grid] into\n"
           "configs. Every error names the file and line.\n"
           "\n"
           "options:\n"
           "  --list         print the configs (index, hash prefix, canonical form) and stop\n"
           "  --shard K/N    keep configs i with i mod N == K (0 <= K < N); 'auto' takes K and N\n"
           "                 from SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT\n"
           "\n"
           "Axes and what is implemented today:\n");
    const ql_capability *caps;
    size_t n = ql_config_capabilities(&caps);
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        printf("  %-14s", ql_axis_name((ql_axis)a));
        for (size_t i = 0; i < n; i++)
            if (caps[i].axis == (ql_axis)a)
                printf(" %s%s", caps[i].value, caps[i].implemented ? "" : "(later)");
        printf("\n");
    }
    printf("kv_type auto (the default) is f16 for act_mode native, else f32.\n");
}

int ql_cmd_sweep(int argc, char **argv)
{
    const char *file = NULL, *shard_spec = NULL;
    bool list = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help();
            return QL_EXIT_OK;
        } else if (strcmp(a, "--list") == 0) {
            list = true;
        } else if (strcmp(a, "--shard") == 0) {
            if (++i >= argc)
                return ql_cli_usage("sweep", "--shard needs a value (K/N or auto)");
            shard_spec = argv[i];
        } else if (a[0] == '-' && a[1] != '\0') {
            return ql_cli_usage("sweep", "unknown option '%s'", a);
        } else if (!file) {
            file = a;
        } else {
            return ql_cli_usage("sweep", "one sweep file at a time (got '%s' and '%s')", file, a);
        }
    }
    if (!file)
        return ql_cli_usage("sweep", "missing the sweep FILE");

    ql_error err;
    ql_error_clear(&err);
    ql_shard shard = {0, 1};
    if (shard_spec && ql_shard_parse(shard_spec, &shard, &err) != QL_OK)
        return ql_cli_usage("sweep", "%s", err.msg);

    /* Checked before anything else, so a bad file fails before any work. */
    ql_sweep sw;
    if (ql_sweep_load(file, 0, &sw, &err) != QL_OK)
        return ql_cli_fail(&err);

    if (!list) {
        ql_error_set(&err, QL_EUNSUPPORTED,
                     "%s: running sweeps is not available yet (the evaluation pipeline has not "
                     "landed); 'qlab sweep %s --list' shows its %zu configs",
                     file, file, sw.n_points);
        ql_sweep_deinit(&sw);
        return ql_cli_fail(&err);
    }

    size_t kept = 0;
    for (size_t i = 0; i < sw.n_points; i++)
        kept += ql_shard_keeps(&shard, i);
    printf("# sweep %s: model %s, text %s, ctx %d, chunks ", sw.name, sw.model, sw.text, sw.ctx);
    if (sw.chunks)
        printf("%d", sw.chunks);
    else
        printf("all");
    printf(", %zu configs", sw.n_points);
    if (shard.count > 1)
        printf(", shard %d/%d: %zu", shard.index, shard.count, kept);
    printf("\n");
    for (size_t i = 0; i < sw.n_points; i++) {
        if (!ql_shard_keeps(&shard, i))
            continue;
        char text[QL_CONFIG_TEXT_MAX];
        ql_config_to_string(&sw.points[i].config, text, sizeof text);
        printf("%4zu  %.12s  %s\n", i, sw.points[i].hash, text);
    }
    ql_sweep_deinit(&sw);
    if (fflush(stdout) != 0) {
        ql_error_set(&err, QL_EIO, "writing the config list to stdout failed");
        return ql_cli_fail(&err);
    }
    return QL_EXIT_OK;
}
