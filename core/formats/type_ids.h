/* qlab: tensor type ids. Ids below QL_TYPE_GGML_COUNT are ggml's own (they appear in
 * GGUF files); the qlab-only weight schemes (INT8_ROW, Q8_0_XC) live above and are never
 * written to a GGUF file under their own id. What qlab knows of each type: the
 * type-traits table (formats/types.h). */
#ifndef QL_TYPE_IDS_H
#define QL_TYPE_IDS_H

typedef enum {
    QL_TYPE_F32 = 0,
    QL_TYPE_F16 = 1,
    QL_TYPE_Q4_0 = 2,
    QL_TYPE_Q4_1 = 3,
    QL_TYPE_Q5_0 = 6,
    QL_TYPE_Q5_1 = 7,
    QL_TYPE_Q8_0 = 8,
    QL_TYPE_Q8_1 = 9,
    QL_TYPE_Q2_K = 10,
    QL_TYPE_Q3_K = 11,
    QL_TYPE_Q4_K = 12,
    QL_TYPE_Q5_K = 13,
    QL_TYPE_Q6_K = 14,
    QL_TYPE_Q8_K = 15,
    QL_TYPE_IQ2_XXS = 16,
    QL_TYPE_IQ2_XS = 17,
    QL_TYPE_IQ3_XXS = 18,
    QL_TYPE_IQ1_S = 19,
    QL_TYPE_IQ4_NL = 20,
    QL_TYPE_IQ3_S = 21,
    QL_TYPE_IQ2_S = 22,
    QL_TYPE_IQ4_XS = 23,
    QL_TYPE_I8 = 24,
    QL_TYPE_I16 = 25,
    QL_TYPE_I32 = 26,
    QL_TYPE_I64 = 27,
    QL_TYPE_F64 = 28,
    QL_TYPE_IQ1_M = 29,
    QL_TYPE_BF16 = 30,
    QL_TYPE_TQ1_0 = 34,
    QL_TYPE_TQ2_0 = 35,
    QL_TYPE_GGML_COUNT = 39,
    /* qlab-only weight schemes (not GGUF types) */
    QL_TYPE_INT8_ROW = 64, /* per-row int8, fp16 row scale; evaluated in memory only */
    QL_TYPE_Q8_0_XC = 65,  /* Q8_0 bytes with outlier-exact scales; stored as Q8_0 */
    QL_TYPE_ID_LIMIT = 66, /* one past the largest id: the size of the traits table */
    QL_TYPE_INVALID = -1,
} ql_type;

#endif
