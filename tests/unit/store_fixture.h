/* A small results database for tests of the store, the queries and the CLI:
 * one model, one text, four configs (F16, Q8_0, Q4_0 done; IQ4_NL failed) and
 * one run left 'running' (Q5_0), with NaN measurements where a real sweep would
 * have none. */
#ifndef QL_STORE_FIXTURE_H
#define QL_STORE_FIXTURE_H

#include "error.h"

#define QLT_FIXTURE_MODEL_SHA       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define QLT_FIXTURE_TEXT_SHA        "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define QLT_FIXTURE_CTX             128
#define QLT_FIXTURE_CHUNKS          4
#define QLT_FIXTURE_METRICS_VERSION 1
#define QLT_FIXTURE_SWEEP           "fixture"
#define QLT_FIXTURE_ERROR           "quantize: IQ4_NL is \"not implemented\", see a|b"

/* Creates the database at path (which must not exist). */
ql_status qlt_store_fixture(const char *path, ql_error *err);

#endif
