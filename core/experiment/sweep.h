/* qlab: sweep files and their expansion into configs.
 *
 * A sweep file is INI-style text written by hand:
 *
 *   [sweep]
 *   name    = formats-tiny          # default: the file name without .sweep
 *   model   = stories260K           # required: a manifest name or a path
 *   text    = tinystories-valid     # required: manifest names or paths; several
 *                                   # (text = a b c) measure every config on each
 *   ctx     = 128                   # default 512 (llama-perplexity's)
 *   chunks  = 16                    # default 0 = every chunk the text holds
 *   threads = 0                     # default 0 = all cores
 *   layer_metrics = yes             # default no: per-layer divergence (runner.h)
 *   imatrix = calib:tinystories-calib   # any axis here is a single-value default
 *
 *   [grid]                          # cartesian product of these lists
 *   weight_type = F16 Q8_0 Q4_0 IQ2_XS
 *   act_mode    = f32 native
 *   exclude     = weight_type=IQ2_XS act_mode=native   # not this combination
 *
 *   [grid]                          # another product, added to the first
 *   weight_type  = Q4_K_M Q4_K
 *   tensor_types = none attn_v=Q8_0;ffn_down=Q6_K recipes/q4k-big.txt
 *
 * Paths. Every path a sweep file names (model, text, an imatrix file, a calib: text,
 * a weight_type file:, a tensor_types recipe) is relative to the sweep file's directory,
 * wherever qlab runs from; an absolute path is itself. A value that is a name of the
 * data manifest (datasets/manifest.tsv) is that file, found by name (base/data.h). Every
 * error about a path names the sweep file's line and the path qlab looked at.
 *
 * Lines are `key = value...`; values are separated by whitespace (so paths with
 * spaces are not supported). A long list may go on over indented lines that are not
 * `key = ...` lines themselves (errors in them name the key's line). A model may be
 * `synth:PRESET` or `synth:key=value,...` (synth.h): a synthetic model made once.
 * `#` starts a comment at the start of a line or after whitespace. [sweep] appears
 * at most once; [grid] any number of times. Each key at most once per section (but
 * `exclude` and `only`, which may repeat), and an axis either in [sweep] or in
 * grids, not both. weight_type must be given, in [sweep] or in every grid; the other
 * axes default as in ql_config_init.
 *
 * Which combinations run:
 *   - each [grid] is the product of its lists, axes not listed taking [sweep]'s value
 *     or the default; the sweep is the union of its grids (a file without [grid] is
 *     one config of [sweep]'s values);
 *   - `exclude = axis=value ...` drops the configs that match every axis=value of
 *     the pattern; `only = axis=value ...` keeps only the configs that match it (one
 *     of them, when `only` is given several times). In a [grid] they apply to that
 *     grid, in [sweep] to every grid. Values compare as the config computes them
 *     (canonical values: `head_type=Q4_0` matches a Q4_0 config's `same`, kv_type
 *     f16 matches `auto` under act_mode native). A pattern that matches no config,
 *     and a grid they leave empty, are errors (a typo, most likely).
 * Every remaining combination must be able to run: ql_config_validate's rules are
 * checked for each before anything runs, the error naming the line of the axis
 * that breaks one; what depends on the model (rows a requested type does not
 * divide, a mix's architecture, a rule that matches no tensor) is checked by
 * ql_sweep_check_model once the model is open, before the reference pass.
 *
 * tensor_types values: `none`; rules REGEX=TYPE separated by ';' (qlab quantize
 * --tensor-type: first match wins, the pattern searched in the tensor name); or, for
 * a value without '=', a recipe file of one REGEX=TYPE rule per line, `#` comments and
 * blank lines allowed.
 * A config stores the rules themselves (config.h), so editing a recipe file makes
 * new configs.
 *
 * Expansion: grids in file order; in each, axes in ql_axis order, the first varying
 * slowest and the last fastest, each axis's values in file order; a config whose
 * hash was already produced is dropped. So config i of a file is stable, which
 * makes `--shard K/N` (configs with i mod N == K) meaningful across machines.
 *
 * Every error names the file and line and quotes the offending text:
 *   experiments/x.sweep:7: weight_type: unknown type 'Q4_O'; did you mean 'Q4_0'? */
#ifndef QL_SWEEP_H
#define QL_SWEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/data.h"
#include "base/error.h"
#include "experiment/config.h"
#include "model/gguf.h"
#include "model/model.h"

/* Largest grid qlab expands (a typo such as a list of 50 types times 6 modes
 * times 10 ratios should fail fast, not allocate gigabytes). */
#define QL_SWEEP_MAX_CONFIGS 20000
#define QL_SWEEP_NAME_MAX    128
#define QL_SWEEP_DEFAULT_CTX 512
#define QL_SWEEP_MAX_CHUNKS  10000000
#define QL_SWEEP_MAX_THREADS 4096
/* Evaluation texts of one sweep (`text = A B C`). */
#define QL_SWEEP_MAX_TEXTS 16

/* Flags of ql_sweep_parse / ql_sweep_load. */
enum {
    /* Accept axis values the capability table marks as not implemented yet (for
     * tests of the expansion; the CLI never sets it). */
    QL_SWEEP_ALLOW_UNIMPLEMENTED = 1u << 0,
};

typedef struct {
    ql_config config;
    char hash[65];
    int line[QL_AXIS_COUNT]; /* line that gave each axis its value; 0 = the default */
} ql_sweep_point;

typedef struct {
    char path[QL_PATH_MAX]; /* the file as given (used in messages) */
    /* The file's directory, as path gives it ("" when path has none: the current
     * directory): every relative path the file names is relative to it. */
    char dir[QL_PATH_MAX];
    char name[QL_SWEEP_NAME_MAX];
    char model[QL_PATH_MAX]; /* as written: a manifest name, a path or a synth: spec */
    /* The evaluation text this sweep measures on, as written (a manifest name or a
     * path): the first of texts, or the one ql_sweep_select_text chose. */
    char text[QL_PATH_MAX];
    /* `text = A B C`: every config is measured on each text, each with its own
     * reference; the runner runs the sweep once per text (ql_sweep_select_text). */
    char (*texts)[QL_PATH_MAX];
    int n_texts;
    int model_line, text_line;
    int ctx;
    int chunks;  /* 0 = all the text holds */
    int threads; /* 0 = all cores */
    /* Each config's pass runs in lock-step with the reference's and stores the
     * divergence of the residual stream after every block (one more reference pass
     * per config). */
    bool layer_metrics;
    /* Distinct values of each axis among the points; 0 when the file gives the axis
     * nowhere (every point has its default). */
    int n_values[QL_AXIS_COUNT];
    int n_grids; /* [grid] sections (0: the file has none) */
    size_t n_points;
    ql_sweep_point *points; /* expanded, deduplicated, in expansion order */
} ql_sweep;

/* Reads and expands a sweep file. On error sw is left empty (deinit is still safe). */
ql_status ql_sweep_load(const char *path, unsigned flags, ql_sweep *sw, ql_error *err);

/* Same from text in memory; path is only used in messages and for the default name. */
ql_status ql_sweep_parse(const char *path, const char *text, unsigned flags, ql_sweep *sw,
                         ql_error *err);

void ql_sweep_deinit(ql_sweep *sw);

/* Makes text i of sw->texts the one sw->text names (what the runner opens and
 * ql_sweep_resolve looks at; ql_sweep_check_inputs checks every text). */
void ql_sweep_select_text(ql_sweep *sw, int i);

/* The index in sw->texts of a text as written in the file, or -1. */
int ql_sweep_find_text(const ql_sweep *sw, const char *text);

/* The checks of every config that need the model, before anything runs: the type
 * policy plans each config on the model's tensors (a mix on an architecture it has
 * no rules for, INT8_ROW rows it cannot take, ... fail here), a type that head_type,
 * embd_type or a tensor_types rule asks for must fit the rows of every tensor it is
 * asked for (falling back instead would run something else than the file says),
 * and every tensor_types rule must match a tensor. Errors name the sweep file and
 * the line of the axis, and the tensor. */
ql_status ql_sweep_check_model(const ql_sweep *sw, const ql_gguf *model, ql_error *err);

/* The sweep's model or text, as the runner opens it: a manifest name verified (data.h),
 * a path relative to the sweep file's directory. Errors name the sweep file's line and
 * the path looked at. The model must not be a synth: spec (the runner makes those). */
typedef enum { QL_SWEEP_MODEL, QL_SWEEP_TEXT } ql_sweep_input;
ql_status ql_sweep_resolve(const ql_sweep *sw, ql_sweep_input which, char *path, size_t size,
                           const ql_data_entry **entry, ql_error *err);

/* That every file the sweep reads is there, before any work (and for `qlab sweep
 * --list`): the model (unless synth:), every text, each imatrix file and calib: text;
 * names are found, not verified. Errors as ql_sweep_resolve's. */
ql_status ql_sweep_check_inputs(const ql_sweep *sw, ql_error *err);

/* A path the sweep file names, relative to its directory, into out; false when it does
 * not fit. */
bool ql_sweep_path(const ql_sweep *sw, const char *path, char *out, size_t size);

/* The configs whose weight_type is file:PATH: each file loads as a model qlab can run
 * and is a quantization of ref (ql_model_check_same_shape: the same architecture,
 * hyper-parameters, tensor names and shapes). Errors name the sweep file, the line
 * and the first difference. */
ql_status ql_sweep_check_files(const ql_sweep *sw, const ql_model *ref, ql_error *err);

/* A slice of a sweep: configs i with i mod count == index. {0, 1} is everything. */
typedef struct {
    int index;
    int count;
} ql_shard;

/* Slurm's job-array variables as the process's environment has them (NULL: not set);
 * the cli layer reads them (ql_cli_shard_array). */
typedef struct {
    const char *task_id, *task_count, *task_min, *task_step;
} ql_shard_array;

/* Parses "K/N" (0 <= K < N) or "auto": K and N from the job array (NULL: none),
 * K = (SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN) / SLURM_ARRAY_TASK_STEP and
 * N = SLURM_ARRAY_TASK_COUNT (MIN defaults to 0, STEP to 1). */
ql_status ql_shard_parse(const char *spec, const ql_shard_array *array, ql_shard *out,
                         ql_error *err);

bool ql_shard_keeps(const ql_shard *s, size_t i);

#endif
