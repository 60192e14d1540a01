/* The config module's private part, shared by its three files:
 *   config_axes.c    the grammar of each axis (parse, print, value class) and the axis table
 *   config.c         the table's public face, the canonical form, its hash and short labels
 *   config_checks.c  what is implemented, and the rules across axes
 * Nothing outside experiment/config*.c includes it: config.h is the module's API. */
#ifndef QL_CONFIG_IMPL_H
#define QL_CONFIG_IMPL_H

#include <stddef.h>

#include "experiment/config.h"

/* How a weight file is spelled: file:<path>@<sha256>. */
#define CONFIG_FILE_PREFIX "file:"

/* Separates the rules of tensor_types in its canonical value (no pattern holds one). */
#define CONFIG_RULE_SEP ';'

/* One axis: its public facts, its fields in ql_config and its grammar. */
typedef struct {
    ql_axis_info info;
    size_t offset, size; /* its fields in ql_config */
    ql_status (*parse)(ql_config *c, const char *v, ql_error *err);
    int (*print)(const ql_config *c, char *buf, size_t size);
    const char *(*value_class)(const ql_config *c); /* its row of the capability table */
} config_axis;

extern const config_axis config_axes[QL_AXIS_COUNT];
extern const char *const config_axis_names[QL_AXIS_COUNT];

/* A column of the configs table: an axis's, or an extra one computed by `number`. */
typedef struct {
    ql_config_column col;
    double (*number)(const ql_config *c);
} config_column;

/* One per axis, then one per extra column of config.h. */
#define CONFIG_COUNT_ONE(...) +1
#define CONFIG_N_COLUMNS      (QL_AXIS_COUNT QL_CONFIG_EXTRA_COLUMNS(CONFIG_COUNT_ONE))

extern const config_column config_columns[CONFIG_N_COLUMNS];

/* Whether a head/embedding field says `same` (follows the weight type). */
bool config_role_is_same(const ql_config *c, ql_type field);

#endif
