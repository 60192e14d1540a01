/* The qlab subcommands (one file each: cmd_<name>.c). */
#ifndef QL_COMMANDS_H
#define QL_COMMANDS_H

int ql_cmd_fit(int argc, char **argv);
int ql_cmd_version(int argc, char **argv);

#endif
