/* qlab: the activation roundings, by id. What each one does: formats/round.h; the
 * rounding llama.cpp gives the activations of each weight type is a column of the
 * type-traits table (formats/types.h). */
#ifndef QL_ACTQ_IDS_H
#define QL_ACTQ_IDS_H

/* A rounding applied to activations ("fake quant", see round.h). */
typedef enum {
    QL_ACTQ_F32 = 0,
    QL_ACTQ_F16,
    QL_ACTQ_BF16,
    QL_ACTQ_Q8_0,
    QL_ACTQ_Q8_1,
    QL_ACTQ_Q8_K,
    QL_ACTQ_Q8X2,
    QL_ACTQ_COUNT
} ql_actq;

#endif
