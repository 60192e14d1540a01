#include "base/error.h"

#include <string.h>

void ql_error_clear(ql_error *err)
{
    if (!err)
        return;
    err->status = QL_OK;
    err->msg[0] = '\0';
}

ql_status ql_error_set(ql_error *err, ql_status status, const char *fmt, ...)
{
    if (!err)
        return status;
    err->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return status;
}

ql_status ql_error_prefix(ql_error *err, const char *fmt, ...)
{
    if (!err)
        return QL_EINVAL;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Shift the old message right and copy the prefix in front (both truncated to fit). */
    size_t plen = strlen(prefix), olen = strlen(err->msg);
    if (plen > sizeof err->msg - 1)
        plen = sizeof err->msg - 1;
    if (plen + olen > sizeof err->msg - 1)
        olen = sizeof err->msg - 1 - plen;
    memmove(err->msg + plen, err->msg, olen);
    memcpy(err->msg, prefix, plen);
    err->msg[plen + olen] = '\0';
    return err->status;
}

const char *ql_status_name(ql_status status)
{
    switch (status) {
    case QL_OK: return "ok";
    case QL_EIO: return "i/o error";
    case QL_EFORMAT: return "format error";
    case QL_EINVAL: return "invalid argument";
    case QL_ENOMEM: return "out of memory";
    case QL_ENOTFOUND: return "not found";
    case QL_EUNSUPPORTED: return "unsupported";
    case QL_EDB: return "database error";
    case QL_EEXTERNAL: return "external program failed";
    case QL_EINTERRUPTED: return "interrupted";
    }
    return "unknown status";
}
