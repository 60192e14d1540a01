/* qlab: one sweep point (DESIGN.md section 3).
 *
 * A config fixes every axis of an experiment: the weight type of the body, of
 * the LM head and of the embeddings, how activations and the K/V cache are
 * rounded, the outlier split, the importance matrix and a byte budget. Axes not
 * given take their defaults (ql_config_init).
 *
 * Canonical form: one line, the axes in the fixed order of ql_axis, each as
 * `axis=value`, separated by one space, e.g.
 *
 *   weight_type=Q4_0 act_mode=f32 outlier_ratio=0 head_type=same embd_type=same kv_type=f32
 * imatrix=none budget=none
 *
 * with canonical spellings: type names as GGUF spells them (Q4_K), act modes
 * as in the table below (q8_K), numbers in their shortest exact decimal form
 * (3.0 -> 3), a head/embd type equal to weight_type written `same`, kv_type
 * `auto` written as the type it stands for, a byte budget as a whole number of
 * bytes. Two configs that compute the same thing therefore have the same
 * canonical form, and its SHA-256 (ql_config_hash) is the config's identity in
 * the results store. Changing the canonical form of an existing config changes
 * its hash and makes every stored result unreachable: tests pin a known hash.
 * An axis added later must appear in the canonical form only when it differs
 * from its default, so that existing hashes stay valid. */
#ifndef QL_CONFIG_H
#define QL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "formats/types.h"

/* The axes in canonical order (also the expansion order of a sweep grid). */
typedef enum {
    QL_AXIS_WEIGHT_TYPE,
    QL_AXIS_ACT_MODE,
    QL_AXIS_OUTLIER_RATIO,
    QL_AXIS_HEAD_TYPE,
    QL_AXIS_EMBD_TYPE,
    QL_AXIS_KV_TYPE,
    QL_AXIS_IMATRIX,
    QL_AXIS_BUDGET,
    QL_AXIS_COUNT
} ql_axis;

/* How activations entering each matmul are rounded (DESIGN.md section 3). */
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

typedef enum { QL_BUDGET_NONE, QL_BUDGET_BYTES, QL_BUDGET_BPW } ql_budget_kind;

/* head_type / embd_type value meaning "the same as weight_type". */
#define QL_TYPE_SAME QL_TYPE_INVALID

#define QL_CONFIG_IMATRIX_MAX 1024
/* Room for any canonical form: eight axes, the imatrix value being the longest. */
#define QL_CONFIG_TEXT_MAX (QL_CONFIG_IMATRIX_MAX + 512)

/* Calibration context lengths accepted in `calib:NAME,ctx=N` (also the range of a sweep's ctx). */
#define QL_CTX_MIN 8
#define QL_CTX_MAX 1048576

typedef struct {
    ql_type weight_type;
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
} ql_config;

/* Axis names ("weight_type"); ql_axis_lookup is exact (axis names are lower case). */
const char *ql_axis_name(ql_axis axis);
bool ql_axis_lookup(const char *name, ql_axis *out);

const char *ql_act_mode_name(ql_act_mode mode);
const char *ql_kv_type_name(ql_kv_type kv);

/* Defaults: weight_type F32, act_mode f32, outlier_ratio 0, head/embd same,
 * kv_type auto, imatrix none, budget none. */
void ql_config_init(ql_config *c);

/* Parses one value of one axis into c (names case-insensitive). Checks the value
 * alone (a known name, a number in range); neither the other axes nor whether
 * qlab implements it yet. Messages start with the axis name and quote the value
 * ("weight_type: unknown type 'Q4_O'; did you mean 'Q4_0'?"). */
ql_status ql_config_set(ql_config *c, ql_axis axis, const char *value, ql_error *err);

/* Copies one axis from src to dst. */
void ql_config_copy_axis(ql_config *dst, const ql_config *src, ql_axis axis);

/* Rules across axes: a type that ggml refuses to quantize without an importance
 * matrix (IQ2_XXS, IQ2_XS, IQ1_S) needs imatrix != none. *bad_axis (may be NULL)
 * receives the axis whose value breaks the rule. */
ql_status ql_config_validate(const ql_config *c, ql_axis *bad_axis, ql_error *err);

/* Whether the evaluation pipeline implements this axis value today (see the
 * capability table in config.c). QL_EUNSUPPORTED with "act_mode q8_0 is not
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

/* Lower-case hex SHA-256 of the canonical form. */
void ql_config_hash(const ql_config *c, char out[65]);

/* Resolved values: head/embd type with `same` replaced, kv_type with `auto` replaced. */
ql_type ql_config_head_type(const ql_config *c);
ql_type ql_config_embd_type(const ql_config *c);
ql_kv_type ql_config_kv_type(const ql_config *c);

/* A resolved cache type as a ggml type id: F32, F16, Q8_0, Q4_0 (AUTO must be resolved
 * first with ql_config_kv_type). */
int32_t ql_kv_ggml_type(ql_kv_type kv);

/* Whether a type may be a weight type: a GGUF type with blocks that is a
 * quantization target, or a qlab scheme (INT8_ROW, Q8_0_XC). Integer tensor
 * types (I8..I64), F64 and the activation-only formats Q8_1 and Q8_K are not;
 * *why (may be NULL) says why. */
bool ql_config_is_weight_type(const ql_type_traits *t, const char **why);

/* The candidate closest to word by edit distance (case-insensitive), or NULL when
 * none is close enough to be a likely typo. */
const char *ql_closest_name(const char *word, const char *const *candidates, size_t n);

#endif
