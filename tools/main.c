/* tools/main.c — the `lwq` command: dispatch to one subcommand per file. */
#include <stdio.h>
#include <string.h>

#include "tools/commands.h"
#include "tools/tool_util.h"

static int lwq_cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("lwq %s\n", LWQ_VERSION);
    return LWQ_EXIT_OK;
}

static const lwq_command commands[] = {
    {"inspect", lwq_cmd_inspect, "describe a checkpoint: architecture, layers, bytes, tail"},
    {"diff", lwq_cmd_diff, "compare two checkpoints tensor by tensor (exit 0 same, 1 different)"},
    {"mkmodel", lwq_cmd_mkmodel, "write a synthetic checkpoint (llama, qwen3, qwen3_moe, mixtral, deepseek, qwen3_next)"},
    {"quantize", lwq_cmd_quantize, "quantize a checkpoint to NVFP4/FP8, layer by layer, resumable"},
    {"plan", lwq_cmd_plan, "predict memory and output size of a quantize run (lwq eval --plan: of an eval)"},
    {"eval", lwq_cmd_eval, "measure what quantization costs: per-layer error, KL, top-1, perplexity"},
    {"verify", lwq_cmd_verify, "check a quantized checkpoint: checksums, index, configs, scales"},
    {"version", lwq_cmd_version, "print the version"},
    {"bench-io", lwq_cmd_bench_io, "cold read throughput of files per I/O path (io_uring, pread, mmap)"},
    {"tokenize", lwq_cmd_tokenize, "tokenize or decode stdin with a model's tokenizer.json"},
};

static void usage(FILE *fp)
{
    fprintf(fp, "lwq %s — layerwise NVFP4/FP8 quantization of LLM checkpoints on one GPU\n\n"
                "usage: lwq <command> [options]   (lwq <command> --help for its options)\n\n"
                "commands:\n",
            LWQ_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(fp, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(fp, "\nexit status: 0 success, 1 a difference or failed check (diff, verify), 2 error\n");
}

int main(int argc, char **argv)
{
    /* Under an MPI launcher every rank meets the others first, whatever it was asked to do: an
     * `lwq quantize` rank (which meets them in tools/quantize/cmd_quantize.c) must not wait for ever for
     * one that runs another command and leaves.  "lwq plan --eval" meets them in lwq_cmd_plan. */
    if (argc < 2 || (strcmp(argv[1], "quantize") && strcmp(argv[1], "plan"))) {
        char what[128];
        snprintf(what, sizeof what, "lwq%s%.100s", argc < 2 ? "" : " ", argc < 2 ? "" : argv[1]);
        if (lwq_tool_job_alone(what) != 0)
            return LWQ_EXIT_ERR;
    }
    if (argc < 2) {
        usage(stderr);
        return LWQ_EXIT_ERR;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return LWQ_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("lwq %s\n", LWQ_VERSION);
        return LWQ_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "lwq: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return LWQ_EXIT_ERR;
}
