/* The qlab subcommands (one file each: cmd_<name>.c). */
#ifndef QL_COMMANDS_H
#define QL_COMMANDS_H

int ql_cmd_fit(int argc, char **argv);
int ql_cmd_bench(int argc, char **argv);
int ql_cmd_merge(int argc, char **argv);
int ql_bench_act(int argc, char **argv);     /* qlab bench act (cmd_bench_act.c) */
int ql_bench_forward(int argc, char **argv); /* qlab bench forward (cmd_bench_forward.c) */
int ql_bench_gptq(int argc, char **argv);    /* qlab bench gptq (cmd_bench_gptq.c) */
int ql_cmd_compare(int argc, char **argv);
int ql_cmd_eval(int argc, char **argv);
int ql_cmd_generate(int argc, char **argv);
int ql_cmd_quantize(int argc, char **argv);
int ql_cmd_query(int argc, char **argv);
int ql_cmd_report(int argc, char **argv);
int ql_cmd_sweep(int argc, char **argv);
int ql_cmd_synth(int argc, char **argv);
int ql_cmd_tokenize(int argc, char **argv);
int ql_cmd_data(int argc, char **argv);
int ql_cmd_imatrix(int argc, char **argv);
int ql_cmd_imatrix_convert(int argc, char **argv);
int ql_cmd_inspect(int argc, char **argv);
int ql_cmd_version(int argc, char **argv);

#endif
