/* qlab: the zlib level-9 size of a set of quantized tensors, as the 16 MB artifact
 * challenge counts it (INT8_ROW's size rule, formats/quant_int8row.h). */
#ifndef QL_ZLIB_SIZE_H
#define QL_ZLIB_SIZE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* One quantized tensor as qlab holds it in memory, for the size count below. */
typedef struct {
    int32_t type;     /* any type with a row size; INT8_ROW is serialized planar */
    const void *data; /* nrows * ql_row_size(type, n_per_row) bytes */
    int64_t nrows;
    int64_t n_per_row;
} ql_zlib_tensor;

/* Serializes the tensors in order and returns the zlib level-9 size (compress2) of
 * the result in *out. Serialization: each tensor's bytes as stored, except INT8_ROW,
 * which is written as the challenge's torch.save payload holds it: all int8 levels
 * (row-major) followed by all fp16 row scales. The container (pickle/zip framing) of
 * the challenge is not modelled: it adds a few KB. Allocates the serialized buffer
 * and compressBound() bytes of output. */
ql_status ql_zlib_size_tensors(const ql_zlib_tensor *t, size_t n, uint64_t *out, ql_error *err);

#endif
