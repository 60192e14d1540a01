/* ggml's tensor names (tensor_name.h). */
#include "model/tensor_name.h"

#include <string.h>

int ql_tensor_block(const char *name, const char **rest)
{
    if (rest)
        *rest = name;
    if (strncmp(name, "blk.", 4) != 0)
        return -1;
    const char *p = name + 4;
    if (*p < '0' || *p > '9')
        return -1;
    int n = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        n = n * 10 + (*p - '0');
        if (n > QL_TENSOR_BLOCK_MAX)
            return -1;
    }
    if (*p != '.')
        return -1;
    if (rest)
        *rest = p + 1;
    return n;
}
