/* qlab: one sweep point.
 *
 * A config fixes every axis of an experiment: the weight type of the body, of
 * the LM head and of the embeddings, how activations and the K/V cache are
 * rounded, the outlier split, the importance matrix, a byte budget and per-tensor
 * type rules. Axes not given take their defaults (ql_config_init).
 *
 * weight_type is a pure type (every weight in it: llama-quantize --pure) or one of
 * llama-quantize's file types (a "mix", model/quant_policy.h: its per-tensor rules
 * decide). A name that is both (Q4_0, Q6_K, IQ4_XS, ...) is the pure type; the mix
 * of that name is spelled `mix:Q6_K` (`mix:` takes any of llama-quantize's TYPE
 * names, aliases and numbers). Names that are only mixes (Q4_K_M, IQ3_M) need no
 * prefix; the aliases Q3_K, Q4_K and Q5_K are pure types, as they always were here.
 * `file:PATH` takes every tensor from an existing GGUF of the same model (made by
 * llama-quantize, another tool or qlab); its canonical value is `file:PATH@SHA256`
 * (the file's hash: a changed file is a new config), and the weight axes
 * (outlier_ratio, head_type, embd_type, imatrix, budget, tensor_types) must keep
 * their defaults, since the file decides every tensor.
 *
 * Canonical form: one line, the axes in the fixed order of ql_axis, each as
 * `axis=value`, separated by one space, e.g.
 *
 *   weight_type=Q4_0 act_mode=f32 outlier_ratio=0 head_type=same embd_type=same kv_type=f32
 * imatrix=none budget=none
 *
 * with canonical spellings: type names as GGUF spells them (Q4_K), a mix as
 * llama-quantize spells it (Q4_K_M, mix:Q6_K), act modes as in the table below
 * (q8_K), numbers in their shortest exact decimal form (3.0 -> 3), a head/embd
 * type equal to a pure weight_type written `same`, kv_type `auto` written as the
 * type it stands for, a byte budget as a whole number of bytes, tensor_types rules
 * as the policy reads them (pattern lowercased, type as GGUF spells it, ';'
 * between rules). Two configs that compute the same thing therefore have the same
 * canonical form, and its SHA-256 (ql_config_hash) is the config's identity in
 * the results store. Changing the canonical form of an existing config changes
 * its hash and makes every stored result unreachable: tests pin the hashes of
 * tests/data/config/canonical-hashes.tsv. An axis added later appears in the
 * canonical form only when it differs from its default (QL_AXIS_OMIT_DEFAULT),
 * so that existing hashes stay valid. */
#ifndef QL_CONFIG_H
#define QL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/suggest.h" /* ql_closest_name, which the parsers here use */
#include "formats/gptq.h"
#include "formats/types.h"
#include "model/quant_policy.h"

/* The axes, one line each, in canonical order (also the expansion order of a sweep
 * grid and the column order of the store's configs table). Everything qlab does
 * per axis derives from this list; what an axis means (its fields below, its parser,
 * printer and value classes) lives in config_axes.c under the axis's name.
 *
 *   X(ID, name, first, last, default, sql, since, label, shown_default, flags, comment)
 *
 *   ID             the enum value QL_AXIS_<ID>
 *   name           key of the canonical form and the sweep file, and the column of
 *                  the store's configs table; config_axes.c defines parse_<name>,
 *                  print_<name> and class_<name>
 *   first, last    the ql_config fields that hold its value (a contiguous range)
 *   default        its value when not given, as a sweep file would spell it
 *   sql            type of its configs column: TEXT (the canonical value) or REAL
 *   since          store schema version whose configs table first had the column
 *   label          header of report tables and key of short labels ("head=F32")
 *   shown_default  how report tables show the default value (NULL: as it is)
 *   flags          QL_AXIS_* below
 *   comment        what its configs column holds, for the schema (or NULL)
 *
 * An axis added later must carry QL_AXIS_OMIT_DEFAULT: the canonical form of every
 * config written before it existed must not change (header comment). */
// clang-format off
#define QL_AXES(X)                                                                                 \
    X(WEIGHT_TYPE,   weight_type,   weight_type,   weight_mix,     "F32",  TEXT, 1,                \
      "weights",  NULL,  QL_AXIS_WEIGHTS, NULL)                                                    \
    X(ACT_MODE,      act_mode,      act_mode,      act_mode,       "f32",  TEXT, 1,                \
      "act",      NULL,  0, NULL)                                                                  \
    X(OUTLIER_RATIO, outlier_ratio, outlier_ratio, outlier_ratio,  "0",    REAL, 1,                \
      "outliers", "off", QL_AXIS_WEIGHTS | QL_AXIS_LABEL_SKIPS_DEFAULT, "0 = off")                 \
    X(HEAD_TYPE,     head_type,     head_type,     head_type,      "same", TEXT, 1,                \
      "head",     NULL,  QL_AXIS_WEIGHTS | QL_AXIS_LABEL_SKIPS_DEFAULT, "'same' or a type")        \
    X(EMBD_TYPE,     embd_type,     embd_type,     embd_type,      "same", TEXT, 1,                \
      "embd",     NULL,  QL_AXIS_WEIGHTS | QL_AXIS_LABEL_SKIPS_DEFAULT, "'same' or a type")        \
    X(KV_TYPE,       kv_type,       kv_type,       kv_type,        "auto", TEXT, 1,                \
      "KV",       NULL,  0, "resolved (never 'auto')")                                             \
    X(IMATRIX,       imatrix,       imatrix_kind,  imatrix_chunks, "none", TEXT, 1,                \
      "imatrix",  NULL,  QL_AXIS_WEIGHTS | QL_AXIS_LABEL_SKIPS_DEFAULT,                            \
      "'none', a path, or 'calib:<dataset>[,ctx=N][,chunks=N]'")                                   \
    X(BUDGET,        budget,        budget_kind,   budget_like,    "none", TEXT, 1,                \
      "budget",   NULL,  QL_AXIS_WEIGHTS | QL_AXIS_LABEL_SKIPS_DEFAULT, "'none', bytes, 'bpw:X' or a type") \
    X(TENSOR_TYPES,  tensor_types,  tensor_types,  tensor_types,   "none", TEXT, 4,                \
      "recipe",   NULL,                                                                            \
      QL_AXIS_WEIGHTS | QL_AXIS_LABEL_SKIPS_DEFAULT | QL_AXIS_OMIT_DEFAULT,                        \
      "'none' or REGEX=TYPE rules separated by ';' (first match wins)")                       \
    X(OBJECTIVE,     objective,     objective,     grouping,       "imatrix", TEXT, 8,             \
      "objective", NULL,                                                                           \
      QL_AXIS_WEIGHTS | QL_AXIS_LABEL_SKIPS_DEFAULT | QL_AXIS_OMIT_DEFAULT,                        \
      "what a budget's solver minimises: 'imatrix' (weighted weight error) or 'kld' (measured "    \
      "sensitivities; 'kld:module', 'kld:layer', 'kld:kind': of groups that take one type)")      \
    X(QUANTIZER,     quantizer,     quantizer_gptq, gptq,          "ggml", TEXT, 11,               \
      "quantizer", NULL,                                                                           \
      QL_AXIS_WEIGHTS | QL_AXIS_LABEL_SKIPS_DEFAULT | QL_AXIS_OMIT_DEFAULT,                        \
      "'ggml' (llama-quantize's rounding) or 'gptq[:OPTS]' (GPTQ into the same formats; OPTS "     \
      "the options that differ from GPTQ's defaults)")
// clang-format on

/* Flags of an axis. */
enum {
    /* The canonical form leaves the axis out while it has its default value. */
    QL_AXIS_OMIT_DEFAULT = 1u << 0,
    /* Short labels and plot keys leave it out at its default ("head same", "imatrix
     * none" go without saying). */
    QL_AXIS_LABEL_SKIPS_DEFAULT = 1u << 1,
    /* It changes the quantized weights (not how they are evaluated): runs that differ
     * only in other axes share their weights. */
    QL_AXIS_WEIGHTS = 1u << 2,
};

typedef enum {
#define QL_AXIS_ENUM(ID, ...) QL_AXIS_##ID,
    QL_AXES(QL_AXIS_ENUM)
#undef QL_AXIS_ENUM
        QL_AXIS_COUNT
} ql_axis;

/* Type of a column of the store's configs table. */
typedef enum { QL_COLUMN_TEXT, QL_COLUMN_REAL, QL_COLUMN_INTEGER } ql_column_type;

/* Columns of the configs table beyond the axes' own, each derived from one axis's
 * value: X(ID of the axis, column, type, since, schema comment). config_axes.c defines
 * column_<column> (the value as a number, NAN for NULL). */
// clang-format off
#define QL_CONFIG_EXTRA_COLUMNS(X)                                                                 \
    X(BUDGET, budget_bytes, INTEGER, 1, "the byte budget, NULL unless given in bytes")             \
    X(BUDGET, budget_bpw,   REAL,    1, "the bpw budget, NULL unless given as bpw:X")
// clang-format on

/* How activations entering each matmul are rounded. */
typedef enum {
    QL_ACT_F32,    /* none */
    QL_ACT_NATIVE, /* what llama.cpp's CPU backend uses for the weight type */
    QL_ACT_Q8_0,
    QL_ACT_Q8_1,
    QL_ACT_Q8_K,
    QL_ACT_Q8X2, /* q8_0 plus a q8_0 pass on the residual */
    QL_ACT_COUNT
} ql_act_mode;

/* Type the K/V cache is rounded to. AUTO is f16 for act_mode native, else f32. */
typedef enum { QL_KV_AUTO, QL_KV_F32, QL_KV_F16, QL_KV_Q8_0, QL_KV_Q4_0, QL_KV_COUNT } ql_kv_type;

typedef enum { QL_IMATRIX_NONE, QL_IMATRIX_FILE, QL_IMATRIX_CALIB } ql_imatrix_kind;

/* A budget in bytes, in bits per weight, or as the size of this model in a type or mix
 * (LIKE: `budget = Q4_K_M`, resolved against the model and the importance matrix when
 * the config is planned, fit.h's ql_fit_budget_of). */
typedef enum { QL_BUDGET_NONE, QL_BUDGET_BYTES, QL_BUDGET_BPW, QL_BUDGET_LIKE } ql_budget_kind;

/* What a budget's solver minimises (fit.h): the summed imatrix-weighted weight error, or
 * the summed measured sensitivities (sensitivity.h) on the calibration text of the
 * config's calib: imatrix. */
typedef enum { QL_OBJECTIVE_IMATRIX, QL_OBJECTIVE_KLD } ql_objective;

/* The units the kld objective measures and the solver gives one type each
 * (`objective = kld:<grouping>`; the head and the token embedding are units of their
 * own in every grouping):
 *   TENSOR  each product weight (the default, `kld`): the finest a GGUF type applies to
 *   MODULE  a block's attention (q, k, v, output) or its feed-forward (gate, up, down)
 *   LAYER   every product of a block
 *   KIND    one kind of product in every block (all ffn_down, ...)
 *   EXPERT  a mixture of experts: each expert's three matrices in a block measured on
 *           their own (the other experts at reference precision); the fit's unit is the
 *           block's three expert tensors (a GGUF tensor holds every expert in one type),
 *           whose sensitivity to a type is the sum of its experts'. Other products are
 *           units of their own, as in TENSOR. */
typedef enum {
    QL_GROUPING_TENSOR,
    QL_GROUPING_MODULE,
    QL_GROUPING_LAYER,
    QL_GROUPING_KIND,
    QL_GROUPING_EXPERT,
    QL_GROUPING_COUNT
} ql_grouping;

/* "tensor", "module", "layer", "kind", "expert"; parsing is case-insensitive. */
const char *ql_grouping_name(ql_grouping g);
bool ql_grouping_parse(const char *s, ql_grouping *out);

/* head_type / embd_type value meaning "the same as weight_type". */
#define QL_TYPE_SAME QL_TYPE_INVALID

#define QL_CONFIG_IMATRIX_MAX 1024
/* Longest tensor_types value: its rules joined by ';'. */
#define QL_CONFIG_RECIPE_MAX 1024
/* Room for the canonical value of any axis (the imatrix path and the rules are the
 * longest) and for the whole canonical form ("name=value " per axis). */
#define QL_CONFIG_VALUE_MAX (QL_CONFIG_IMATRIX_MAX + 64)
#define QL_CONFIG_TEXT_MAX  (QL_AXIS_COUNT * (QL_CONFIG_VALUE_MAX + 32))

/* Calibration context lengths accepted in `calib:NAME,ctx=N` (also the range of a sweep's ctx). */
#define QL_CTX_MIN 8
#define QL_CTX_MAX 1048576

typedef struct {
    ql_type weight_type; /* pure: every weight's type; a mix: its default type; file: F32 */
    /* weight_type file:PATH: every tensor from an existing GGUF of the same model (its
     * types as the file has them); "" otherwise. weight_file is the path as written
     * (canonical), weight_file_sha its SHA-256 in hex ("" until hashed: ql_sweep_load
     * hashes it; the canonical form then carries it, so a changed file is a new
     * config), weight_file_open the path to open (a sweep's relative path resolved
     * against its directory; not canonical). */
    char weight_file[QL_CONFIG_IMATRIX_MAX];
    char weight_file_sha[65];
    char weight_file_open[QL_CONFIG_IMATRIX_MAX];
    const ql_quant_mix *weight_mix; /* llama-quantize's file type; NULL: pure weight_type */
    ql_act_mode act_mode;
    double outlier_ratio; /* 0 = off, else > 1 */
    ql_type head_type;    /* QL_TYPE_SAME or a weight type */
    ql_type embd_type;    /* QL_TYPE_SAME or a weight type */
    ql_kv_type kv_type;
    ql_imatrix_kind imatrix_kind;
    char imatrix[QL_CONFIG_IMATRIX_MAX]; /* FILE: path as written; CALIB: dataset name */
    int imatrix_ctx;    /* CALIB: chunk length of the calibration pass; 0 = the run's ctx */
    int imatrix_chunks; /* CALIB: chunks used; 0 = all the text holds */
    ql_budget_kind budget_kind;
    int64_t budget_bytes; /* BYTES */
    double budget_bpw;    /* BPW */
    char budget_like[32]; /* LIKE: the weight type or mix, canonical (Q4_K_M, mix:Q6_K) */
    ql_objective objective;
    ql_grouping grouping; /* KLD: its units */
    /* --tensor-type rules in canonical form (REGEX=TYPE;...; patterns lowercased as
     * the policy matches them, types as GGUF spells them); "" = none. */
    char tensor_types[QL_CONFIG_RECIPE_MAX];
    /* quantizer: gptq (formats/gptq.h: its Hessians from the calibration text of
     * imatrix = calib:TEXT, experiment/gptq_pass.h), else ggml's own rounding. */
    bool quantizer_gptq;
    ql_gptq_opts gptq; /* its options; GPTQ's defaults with quantizer ggml */
} ql_config;

/* Axis names ("weight_type"); ql_axis_lookup is exact (axis names are lower case). */
const char *ql_axis_name(ql_axis axis);
bool ql_axis_lookup(const char *name, ql_axis *out);

/* What the list says about one axis. */
typedef struct {
    const char *name;
    const char *label;
    const char *shown_default; /* or NULL */
    const char *default_value; /* as given: "auto" for kv_type */
    ql_column_type sql;        /* QL_COLUMN_TEXT or QL_COLUMN_REAL */
    int since;
    unsigned flags;
} ql_axis_info;

const ql_axis_info *ql_axis_get(ql_axis axis);

/* The canonical value of the axis in a config with every default ("same", "f32"). */
int ql_axis_default_string(ql_axis axis, char *buf, size_t size);

/* A column of the configs table: every axis's, in axis order, then the extra ones. */
typedef struct {
    const char *name;
    ql_axis axis;
    ql_column_type type;
    int since;
    const char *comment; /* for the schema, or NULL */
} ql_config_column;

size_t ql_config_columns(const ql_config_column **out);

/* The value of configs column i for c: TEXT columns as their text in buf (the axis's
 * canonical value), the others as *number (NAN for NULL). */
void ql_config_column_value(const ql_config *c, size_t i, char *buf, size_t size, double *number);

const char *ql_act_mode_name(ql_act_mode mode);
const char *ql_kv_type_name(ql_kv_type kv);

/* Every axis at its default (the list above). */
void ql_config_init(ql_config *c);

/* Parses one value of one axis into c (names case-insensitive). Checks the value
 * alone (a known name, a number in range); neither the other axes nor whether
 * qlab implements it yet. Messages start with the axis name and quote the value
 * ("weight_type: unknown type 'Q4_O'; did you mean 'Q4_0'?"). */
ql_status ql_config_set(ql_config *c, ql_axis axis, const char *value, ql_error *err);

/* Copies one axis from src to dst. */
void ql_config_copy_axis(ql_config *dst, const ql_config *src, ql_axis axis);

/* Rules across axes, every one a combination that cannot run:
 *   - a type ggml refuses to quantize without an importance matrix (IQ2_XXS, IQ2_XS,
 *     IQ1_S) as weight, head or embedding type or in a tensor_types rule, and a mix
 *     llama-quantize refuses without one (IQ2_S, Q2_K_S, ...), need imatrix != none;
 *   - an outlier split needs imatrix = calib:<text> (the pass that measures the
 *     channels);
 *   - a budget lets the solver choose every tensor's type: head_type and embd_type
 *     same, tensor_types none, and a pure weight_type (it caps the solver's types).
 * *bad_axis (may be NULL) receives the axis whose value breaks the rule. Rules that
 * depend on the model (row lengths, architecture) are the sweep's (sweep.h). */
ql_status ql_config_validate(const ql_config *c, ql_axis *bad_axis, ql_error *err);

/* Whether the evaluation pipeline implements this axis value today (see the
 * capability table in config_checks.c). QL_EUNSUPPORTED with "act_mode q8_0 is not
 * implemented yet" when not. */
ql_status ql_config_check_axis(const ql_config *c, ql_axis axis, ql_error *err);
/* All axes. */
ql_status ql_config_check_implemented(const ql_config *c, ql_error *err);

/* One row of the capability table: an axis value (or a class of values, written
 * in angle brackets or with a comparison: "<type>", "<path>", ">1") and whether
 * it is implemented. Later issues flip entries on. */
typedef struct {
    ql_axis axis;
    const char *value;
    bool implemented;
} ql_capability;

/* The capability table; returns its length. */
size_t ql_config_capabilities(const ql_capability **out);

/* Canonical spelling of one axis value ("same", "f16", "3", "calib:x,ctx=64").
 * Returns the length snprintf would write. */
int ql_config_axis_string(const ql_config *c, ql_axis axis, char *buf, size_t size);

/* The canonical form (header comment). buf should hold QL_CONFIG_TEXT_MAX bytes;
 * returns the length snprintf would write. */
int ql_config_to_string(const ql_config *c, char *buf, size_t size);

/* Reads `axis=value` pairs separated by spaces, in any order; axes not given
 * take their defaults. Unknown or repeated axes and bad values are errors. */
ql_status ql_config_from_string(const char *s, ql_config *c, ql_error *err);

/* A short label of a config for progress lines and the sweep summary: the weight
 * type, then `name=value` for every other axis with varies[axis] set (but an axis the
 * canonical form leaves out at its default, QL_AXIS_OMIT_DEFAULT, when it is). */
void ql_config_short_label(const ql_config *c, const bool varies[QL_AXIS_COUNT], char *buf,
                           size_t size);

/* Lower-case hex SHA-256 of the canonical form. */
void ql_config_hash(const ql_config *c, char out[65]);

/* Resolved values: head/embd type with `same` replaced, kv_type with `auto` replaced.
 * For a mix, `same` stands for the mix's rule, which depends on the model: the
 * resolved head and embedding types are then the mix's default type. */
ql_type ql_config_head_type(const ql_config *c);
ql_type ql_config_embd_type(const ql_config *c);
ql_kv_type ql_config_kv_type(const ql_config *c);

/* A resolved cache type as a ggml type id: F32, F16, Q8_0, Q4_0 (AUTO must be resolved
 * first with ql_config_kv_type). */
int32_t ql_kv_ggml_type(ql_kv_type kv);

/* The config's tensor_types rules for the type policy (NULL when none): the caller
 * frees them with ql_quant_overrides_free. */
ql_status ql_config_overrides(const ql_config *c, ql_quant_overrides **out, ql_error *err);

/* What config c asks of the type policy: its weight type or mix, head and embedding
 * types and the rules (from ql_config_overrides, may be NULL, borrowed);
 * has_imatrix: importance weights are given (some of a mix's rules read it). */
ql_quant_config ql_config_quant_request(const ql_config *c, const ql_quant_overrides *rules,
                                        bool has_imatrix);

/* Whether a type may be a weight type: a GGUF type with blocks that is a
 * quantization target, or a qlab scheme (INT8_ROW, Q8_0_XC). Integer tensor
 * types (I8..I64), F64 and the activation-only formats Q8_1 and Q8_K are not;
 * *why (may be NULL) says why. */
bool ql_config_is_weight_type(const ql_type_traits *t, const char **why);

#endif
