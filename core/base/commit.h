/* qlab: the commit the binary was built from (12 hex digits, "unknown" outside a git
 * tree), for `qlab version` and the provenance every run and fit table records. */
#ifndef QL_COMMIT_H
#define QL_COMMIT_H

extern const char ql_commit[];

#endif
