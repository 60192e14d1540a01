/* zlib sizing of quantized tensors (zlib_size.h). */
#include "formats/zlib_size.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "formats/types.h"

ql_status ql_zlib_size_tensors(const ql_zlib_tensor *t, size_t n, uint64_t *out, ql_error *err)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t row = ql_row_size(t[i].type, t[i].n_per_row);
        if (row == 0 || t[i].nrows < 0)
            return ql_error_set(err, QL_EINVAL,
                                "zlib size: tensor %zu (%s): %lld values per row do not form "
                                "whole blocks",
                                i, ql_type_name(t[i].type), (long long)t[i].n_per_row);
        if (t[i].nrows > 0 && row > (SIZE_MAX - total) / (size_t)t[i].nrows)
            return ql_error_set(err, QL_EINVAL, "zlib size: tensor %zu is too large", i);
        total += row * (size_t)t[i].nrows;
    }
    uint8_t *buf = malloc(total ? total : 1);
    uLongf zlen = compressBound((uLong)total);
    uint8_t *zbuf = malloc(zlen);
    ql_status st = QL_OK;
    if (!buf || !zbuf) {
        st = ql_error_set(err, QL_ENOMEM, "zlib size: out of memory for %zu serialized bytes",
                          total);
        goto out;
    }
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        size_t bytes = ql_row_size(t[i].type, t[i].n_per_row) * (size_t)t[i].nrows;
        if (t[i].type != QL_TYPE_INT8_ROW) {
            memcpy(buf + off, t[i].data, bytes);
            off += bytes;
            continue;
        }
        /* Planar: the int8 matrix, then the scale vector. */
        const uint8_t *rows = t[i].data;
        const size_t stride = 2 + (size_t)t[i].n_per_row;
        uint8_t *scales = buf + off + (size_t)t[i].nrows * (size_t)t[i].n_per_row;
        for (int64_t r = 0; r < t[i].nrows; r++) {
            memcpy(buf + off + (size_t)r * (size_t)t[i].n_per_row, rows + (size_t)r * stride + 2,
                   (size_t)t[i].n_per_row);
            memcpy(scales + 2 * (size_t)r, rows + (size_t)r * stride, 2);
        }
        off += bytes;
    }
    int zrc = compress2(zbuf, &zlen, buf, (uLong)total, 9);
    if (zrc != Z_OK) {
        st = ql_error_set(err, QL_EIO, "zlib compress2 failed (code %d) on %zu bytes", zrc, total);
        goto out;
    }
    *out = (uint64_t)zlen;
out:
    free(zbuf);
    free(buf);
    return st;
}
