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
    (void)total;
    /* One deflate stream fed tensor by tensor: the output is the same as compress2's on
     * the concatenation (deflate does not depend on how its input is handed to it),
     * without holding the serialized model in memory. */
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit(&z, 9) != Z_OK)
        return ql_error_set(err, QL_ENOMEM, "zlib size: deflateInit failed");
    enum { OUT = 1 << 16 };
    static _Thread_local uint8_t obuf[OUT];
    uint64_t zlen = 0;
    ql_status st = QL_OK;
    /* Feeds n bytes (flush: Z_NO_FLUSH or Z_FINISH), counting the output. */
#define FEED(ptr, n, flush)                                                                        \
    do {                                                                                           \
        z.next_in = (Bytef *)(ptr);                                                                \
        z.avail_in = (uInt)(n);                                                                    \
        int zr_;                                                                                   \
        do {                                                                                       \
            z.next_out = obuf;                                                                     \
            z.avail_out = OUT;                                                                     \
            zr_ = deflate(&z, (flush));                                                            \
            zlen += OUT - z.avail_out;                                                             \
        } while (zr_ == Z_OK && (z.avail_in > 0 || z.avail_out == 0 || (flush) == Z_FINISH));      \
        if (zr_ != Z_OK && zr_ != Z_STREAM_END && zr_ != Z_BUF_ERROR) {                            \
            st = ql_error_set(err, QL_EIO, "zlib deflate failed (code %d)", zr_);                  \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)
    for (size_t i = 0; i < n; i++) {
        const size_t bytes = ql_row_size(t[i].type, t[i].n_per_row) * (size_t)t[i].nrows;
        if (t[i].type != QL_TYPE_INT8_ROW) {
            /* avail_in is 32-bit: large tensors go in pieces */
            for (size_t off = 0; off < bytes; off += (size_t)1 << 30) {
                const size_t piece =
                    bytes - off < ((size_t)1 << 30) ? bytes - off : (size_t)1 << 30;
                FEED((const uint8_t *)t[i].data + off, piece, Z_NO_FLUSH);
            }
            continue;
        }
        /* Planar: the int8 matrix, then the scale vector. */
        const uint8_t *rows = t[i].data;
        const size_t stride = 2 + (size_t)t[i].n_per_row;
        for (int64_t r = 0; r < t[i].nrows; r++)
            FEED(rows + (size_t)r * stride + 2, t[i].n_per_row, Z_NO_FLUSH);
        for (int64_t r = 0; r < t[i].nrows; r++)
            FEED(rows + (size_t)r * stride, 2, Z_NO_FLUSH);
    }
    FEED(NULL, 0, Z_FINISH);
#undef FEED
    *out = zlen;
out:
    deflateEnd(&z);
    return st;
}
