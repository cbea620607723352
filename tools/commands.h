/* tools/commands.h — one `lwq` subcommand per file: int lwq_cmd_<name>(int argc, char **argv).
 * argv[0] is the subcommand name.  Exit codes: 0 success, 1 "different"/"failed check" where a
 * command defines it, 2 usage or runtime error. */
#ifndef LWQ_TOOLS_COMMANDS_H
#define LWQ_TOOLS_COMMANDS_H

typedef struct lwq_command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} lwq_command;

int lwq_cmd_quantize(int argc, char **argv);
int lwq_cmd_plan(int argc, char **argv);
int lwq_cmd_verify(int argc, char **argv);
int lwq_cmd_inspect(int argc, char **argv);
int lwq_cmd_diff(int argc, char **argv);
int lwq_cmd_mkmodel(int argc, char **argv);
int lwq_cmd_bench_io(int argc, char **argv);
int lwq_cmd_tokenize(int argc, char **argv);
int lwq_cmd_eval(int argc, char **argv);

#define LWQ_EXIT_OK 0
#define LWQ_EXIT_DIFF 1
#define LWQ_EXIT_ERR 2

#endif
