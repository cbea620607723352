/* mpirun -np N lwq quantize: the bytes of one process for any rank count, resume across rank counts, refusals. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/helpers/shell.h"
#include "tests/helpers/fixtures.h"

static char dir[256];
static const char *mpiexec;

static void setup(void)
{
    mpiexec = getenv("LWQ_MPIEXEC");
    if (!mpiexec || !*mpiexec)
        return;
    /* Open MPI as root, more ranks than cores, no ssh (MPICH ignores these) */
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
    setenv("OMPI_MCA_hwloc_base_binding_policy", "none", 1);
    setenv("OMPI_MCA_plm_rsh_agent", "", 1);
    /* a loaded 2-core machine with 3 or 4 ranks: a waiting rank yields the core instead of spinning */
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 1);
    lwqt_tmpdir(dir, sizeof dir, "lwq-ranks");
}

static void teardown(void)
{
    if (dir[0])
        lwqt_rmtree(dir);
}

static void need_mpi(void)
{
    if (!mpiexec || !*mpiexec)
        cr_skip_test("this lwq was built without MPI (LWQ_MPI=OFF or none found): no launcher to test with");
    if (access(mpiexec, X_OK) != 0)
        cr_skip_test("the MPI launcher this lwq was built with, %s, is not here (mpirun absent)", mpiexec);
}

#define CALIB "--calib-size 16 --calib-seq 32 --batch-size 4 --threads 1 --quiet"

static void mkmodel(const char *name, const char *args)
{
    cr_assert_eq(lwqt_sh("'%s' mkmodel '%s/%s' --hidden 128 --layers 3 %s >/dev/null", lwqt_bin(), dir, name, args), 0);
}

/* 0 when every file of a equals b's, byte for byte */
static int same_files(const char *a, const char *b)
{
    return lwqt_sh("cd '%s/%s' && sha256sum * > '%s/%s.sha' && cd '%s/%s' && sha256sum -c --quiet '%s/%s.sha' && "
                   "[ $(ls | wc -l) = $(wc -l < '%s/%s.sha') ]",
                   dir, a, dir, a, dir, b, dir, a, dir, a);
}

static int quantize(const char *launch, const char *model, const char *out, const char *args)
{
    return lwqt_sh("cd '%s' && %s '%s' quantize %s -o %s " CALIB " %s > %s.log 2>&1", dir, launch, lwqt_bin(), model,
                   out, args, out);
}

static char *log_of(const char *out)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s.log", dir, out);
    FILE *f = fopen(p, "r");
    cr_assert_not_null(f, "%s", p);
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

TestSuite(ranks, .init = setup, .fini = teardown);

/* The run without a launcher, then `mpiexec -n np` of the same command: the same files, byte for byte. */
static void np_ranks_write_the_bytes_of_one_process(const char *model, const char *args, int np)
{
    cr_assert_eq(quantize("", model, "one", args), 0, "%s", log_of("one"));
    char launch[300], out[16];
    snprintf(launch, sizeof launch, "'%s' -n %d", mpiexec, np);
    snprintf(out, sizeof out, "np%d", np);
    cr_assert_eq(quantize(launch, model, out, args), 0, "%s", log_of(out));
    cr_assert_eq(same_files("one", out), 0, "%d ranks wrote other bytes than one process", np);
}

/* tests/data/peers: the transformers-written tiny checkpoints of the peers goldens */
static const char *peers_data(void)
{
    static char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/tests/data/peers", lwqt_source_dir());
    return path;
}

/* np ranks on the committed source src/<src> with its calibration ids: the bytes of one process */
static void peers_source_over_ranks(const char *src, const char *args, int np)
{
    char a[1600];
    snprintf(a, sizeof a, "--calib '%s/calib.jsonl' %s", peers_data(), args);
    cr_assert_eq(lwqt_sh("cp -r '%s/src/%s' '%s/m'", peers_data(), src, dir), 0);
    np_ranks_write_the_bytes_of_one_process("m", a, np);
}

/* qwen3_5_moe with its experts fused 3-D on disk (mlp.experts.gate_up_proj [E, 2I, H]), each
 * rank's rows of the per-expert linears cut from the fused tensors: 3 ranks write what one
 * process writes. */
Test(ranks, fused_3d_experts_over_three_ranks_write_the_bytes_of_one_process)
{
    need_mpi();
    peers_source_over_ranks("qwen3_5_moe-bf16", "--qformat nvfp4", 3);
}

/* glm_moe_dsa (MLA with the DSA indexer, V3 routing) under local_hessian, where one routed expert
 * of layer 1 gets no calibration token: its 3 linears take the sweep without a Hessian and the
 * calibration report counts them.  Before, the count was not sent with a rank's tensors, so 2
 * ranks wrote a calibration_report.json without "local_hessian_cold_without_hessian". */
Test(ranks, dsa_indexer_and_a_cold_expert_over_two_ranks_write_the_bytes_of_one_process)
{
    need_mpi();
    peers_source_over_ranks("glm_moe_dsa-bf16", "--qformat nvfp4 --algo local_hessian", 2);
    cr_assert_eq(lwqt_sh("grep -Eq '\"local_hessian_cold_without_hessian\":[[:space:]]*3' "
                         "'%s/np2/calibration_report.json'", dir),
                 0, "the report of 2 ranks does not count the cold expert's 3 linears");
}

/* nemotron_h with latent MoE projections (fc1/fc2_latent_proj around non-gated ReLU^2 experts),
 * F32, mse with the scale sweep: 3 ranks write what one process writes. */
Test(ranks, nemotron_h_latent_over_three_ranks_writes_the_bytes_of_one_process)
{
    need_mpi();
    peers_source_over_ranks("nemotron_h_latent-f32", "--qformat nvfp4 --algo mse --fp8-scale-sweep", 3);
}

/* nemotron_h under Model Optimizer's mamba_moe_nvfp4_conservative preset over 4 ranks (one batch each). */
Test(ranks, nemotron_h_preset_over_four_ranks_writes_the_bytes_of_one_process)
{
    need_mpi();
    peers_source_over_ranks("nemotron_h-bf16", "--qformat mamba_moe_nvfp4_conservative", 4);
}

/* kimi_linear (Kimi delta attention, MLA, DeepSeek-style MoE), GPTQ: 2 ranks write what one
 * process writes. */
Test(ranks, kimi_linear_over_two_ranks_writes_the_bytes_of_one_process)
{
    need_mpi();
    peers_source_over_ranks("kimi_linear-bf16", "--qformat fp8 --algo gptq", 2);
}

/* MoE, local_hessian (fixed-point Hessians met over ranks), expert streaming: 3 ranks write
 * what one process writes. */
Test(ranks, three_ranks_write_the_bytes_of_one_process)
{
    need_mpi();
    mkmodel("moe", "--arch qwen3_moe --experts 8 --top-k 2");
    np_ranks_write_the_bytes_of_one_process("moe", "--qformat nvfp4 --algo local_hessian --expert-group 3", 3);
}

/* mistral4 from its transformers-written BF16 checkpoint (tests/data/peers: MLA with the Llama-4
 * query scale, the router rounded to BF16 at every step, fused 3-D experts), with expert
 * streaming: 2 ranks write what one process writes. */
Test(ranks, mistral4_over_two_ranks_writes_the_bytes_of_one_process)
{
    need_mpi();
    const char *data = peers_data();
    char args[1200];
    cr_assert_eq(lwqt_sh("cp -r '%s/src/mistral4-bf16' '%s/m4'", data, dir), 0);
    snprintf(args, sizeof args, "--calib '%s/calib.jsonl' --qformat nvfp4 --expert-group 3", data);
    np_ranks_write_the_bytes_of_one_process("m4", args, 2);
}

/* --qdq-next: every rank gets every quantized tensor back, the linears split over ranks by rows
 * joined from their pieces, and re-runs its batches on them. */
Test(ranks, qdq_next_over_two_ranks_writes_the_bytes_of_one_process)
{
    need_mpi();
    mkmodel("llama", "--arch llama");
    np_ranks_write_the_bytes_of_one_process("llama", "--qformat nvfp4 --algo mse --fp8-scale-sweep --qdq-next", 2);
}

/* GPTQ: sequential calibration re-runs each layer on every rank with all quantized weights. */
Test(ranks, gptq_over_two_ranks_writes_the_bytes_of_one_process)
{
    need_mpi();
    mkmodel("llama", "--arch llama");
    np_ranks_write_the_bytes_of_one_process("llama", "--qformat nvfp4 --algo gptq", 2);
}

/* A rank killed with SIGKILL in the middle of layer 2 ends the job; the identical command resumes
 * with 2 ranks, and a copy of the state with one process: both byte-identical.  Rank 0 queues the
 * manifest of layer 1 for its writer at the meeting that ends layer 1 and goes on with layer 2;
 * the launcher may kill rank 0 before that manifest is durable (1 run in 6 under MPICH here), so
 * the state left names 1 or 2 committed layers, either with three ranks' boundary parts. */
/* The job of 3 ranks on src (in dir) with args, rank 1 killed in layer 2; resumed by 2 ranks and,
 * from a copy of the state, by one process: both write the bytes of the uninterrupted run. */
static void a_killed_rank_resumes(const char *src, const char *a)
{
    cr_assert_eq(quantize("", src, "ref", a), 0, "%s", log_of("ref"));
    char launch[300];
    snprintf(launch, sizeof launch, "LWQ_RANKS_KILL=1:2 '%s' -n 3", mpiexec);
    cr_assert_neq(quantize(launch, src, "o", a), 0, "the job survived a killed rank");
    cr_assert_eq(lwqt_sh("grep -q -E '\"committed\":.[12],' '%s/o.layerwise_resume/manifest.json'", dir), 0,
                 "layer 0, or layers 0 and 1, committed before the kill");
    cr_assert_eq(lwqt_sh("test $(grep -c '\"batches\"' '%s/o.layerwise_resume/manifest.json') = 3", dir), 0,
                 "the manifest does not name three boundary parts");
    cr_assert_eq(lwqt_sh("cd '%s' && cp -r o p && cp -r o.layerwise_resume p.layerwise_resume", dir), 0);
    snprintf(launch, sizeof launch, "'%s' -n 2", mpiexec);
    cr_assert_eq(quantize(launch, src, "o", a), 0, "%s", log_of("o"));
    cr_assert_eq(quantize("", src, "p", a), 0, "%s", log_of("p"));
    cr_assert_eq(same_files("ref", "o"), 0, "resumed with 2 ranks: other bytes");
    cr_assert_eq(same_files("ref", "p"), 0, "resumed by one process: other bytes");
    cr_assert_eq(lwqt_sh("ls '%s/o.layerwise_resume' | grep -q boundary", dir), 1, "boundary parts left behind");
}

Test(ranks, a_killed_rank_resumes_with_another_rank_count)
{
    need_mpi();
    mkmodel("moe", "--arch qwen3_moe --experts 8 --top-k 2 --layers 4");
    a_killed_rank_resumes("moe", "--qformat nvfp4 --algo mse --fp8-scale-sweep");
}

/* nemotron_h (Mamba2 layer, NoPE attention, ReLU^2 MoE): killed in its layer 2, resumed as above. */
Test(ranks, a_killed_rank_on_nemotron_h_resumes_with_another_rank_count)
{
    need_mpi();
    char a[1600];
    snprintf(a, sizeof a, "--calib '%s/calib.jsonl' --qformat nvfp4 --algo mse --fp8-scale-sweep", peers_data());
    cr_assert_eq(lwqt_sh("cp -r '%s/src/nemotron_h-bf16' '%s/m'", peers_data(), dir), 0);
    a_killed_rank_resumes("m", a);
}

/* kimi_linear (KDA and MLA layers, DeepSeek-style MoE): killed in its layer 2, resumed as above. */
Test(ranks, a_killed_rank_on_kimi_linear_resumes_with_another_rank_count)
{
    need_mpi();
    char a[1600];
    snprintf(a, sizeof a, "--calib '%s/calib.jsonl' --qformat nvfp4", peers_data());
    cr_assert_eq(lwqt_sh("cp -r '%s/src/kimi_linear-bf16' '%s/m'", peers_data(), dir), 0);
    a_killed_rank_resumes("m", a);
}

/* One rank cannot allocate the buffers the quantized tensors are gathered into: every rank stops
 * with that rank's error (exit 2), none is left waiting in a send, and no output looks complete.
 * Before, rank 0 stopped and rank 1 stayed blocked in MPI_Send: the job hung. */
Test(ranks, a_rank_out_of_memory_in_the_gather_stops_every_rank)
{
    need_mpi();
    mkmodel("llama", "--arch llama");
    char launch[300];
    snprintf(launch, sizeof launch, "LWQ_RANKS_FAIL_ALLOC=0 timeout -k 5 240 '%s' -n 2", mpiexec);
    int rc = quantize(launch, "llama", "o", "");
    const char *l = log_of("o");
    cr_assert_neq(rc, 124, "the job hung (killed by timeout): %s", l);
    cr_assert_eq(rc, 2, "exit %d: %s", rc, l);
    cr_assert(strstr(l, "rank 0: cannot allocate"), "%s", l);
    cr_assert_eq(lwqt_sh("[ -e '%s/o/model.safetensors.index.json' ] || [ -e '%s/o/config.json' ]", dir, dir), 1,
                 "a refused run left an output that looks complete");
}

Test(ranks, more_ranks_than_batches_is_refused_once)
{
    need_mpi();
    mkmodel("llama", "--arch llama");
    char launch[300];
    snprintf(launch, sizeof launch, "'%s' -n 3", mpiexec);
    cr_assert_eq(quantize(launch, "llama", "o", "--calib-size 8"), 2);
    const char *l = log_of("o");
    const char *m = "3 ranks, but the calibration set makes only 2 batches";
    const char *at = strstr(l, m);
    cr_assert(at, "%s", l);
    cr_assert(!strstr(at + 1, m), "printed by more than one rank: %s", l);
}

/* Two ranks started with different calibration sizes (MPMD): refused, naming the rank and what
 * differs, before anything is written. */
Test(ranks, ranks_with_different_inputs_are_refused_naming_the_rank)
{
    need_mpi();
    mkmodel("llama", "--arch llama");
    cr_assert_eq(lwqt_sh("cd '%s' && '%s' -n 1 '%s' quantize llama -o o " CALIB " : -n 1 '%s' quantize llama -o o "
                         CALIB " --calib-size 12 > o.log 2>&1",
                         dir, mpiexec, lwqt_bin(), lwqt_bin()),
                 2);
    cr_assert(strstr(log_of("o"), "rank 1 differs from rank 0 in: --calib-size (rank 1: 12, rank 0: 16)"), "%s",
              log_of("o"));
    cr_assert_neq(lwqt_sh("ls '%s/o' 2>/dev/null | grep -q safetensors", dir), 0, "a shard was written");
}

/* The same refusal on nemotron_h: ranks with other --qformat are named before anything is written. */
Test(ranks, nemotron_h_ranks_with_different_formats_are_refused_naming_the_rank)
{
    need_mpi();
    cr_assert_eq(lwqt_sh("cp -r '%s/src/nemotron_h-bf16' '%s/m'", peers_data(), dir), 0);
    cr_assert_eq(lwqt_sh("cd '%s' && '%s' -n 1 '%s' quantize m -o o --calib '%s/calib.jsonl' " CALIB
                         " --qformat nvfp4 : -n 1 '%s' quantize m -o o --calib '%s/calib.jsonl' " CALIB
                         " --qformat fp8 > o.log 2>&1",
                         dir, mpiexec, lwqt_bin(), peers_data(), lwqt_bin(), peers_data()),
                 2);
    cr_assert(strstr(log_of("o"), "rank 1 differs from rank 0 in: --qformat"), "%s", log_of("o"));
    cr_assert_neq(lwqt_sh("ls '%s/o' 2>/dev/null | grep -q safetensors", dir), 0, "a shard was written");
}

/* The same command line in two working directories whose calibration files of the same name
 * differ: the options agree, the inputs do not; refused, naming the rank and the calibration. */
Test(ranks, ranks_with_the_same_options_but_other_inputs_are_refused_naming_the_input)
{
    need_mpi();
    mkmodel("llama", "--arch llama");
    cr_assert_eq(lwqt_sh("cd '%s' && mkdir a b && for i in $(seq 16); do echo \"{\\\"input_ids\\\": [$(seq -s, $i "
                         "$((i + 31)))]}\"; done > a/c.jsonl && sed 's/\\[1,/[2,/' a/c.jsonl > b/c.jsonl && "
                         "! cmp -s a/c.jsonl b/c.jsonl", dir),
                 0);
    cr_assert_eq(lwqt_sh("cd '%s' && timeout -k 5 120 '%s' -n 1 -wdir a '%s' quantize '%s/llama' -o '%s/o' --calib "
                         "c.jsonl " CALIB " : -n 1 -wdir b '%s' quantize '%s/llama' -o '%s/o' --calib c.jsonl " CALIB
                         " > o.log 2>&1",
                         dir, mpiexec, lwqt_bin(), dir, dir, lwqt_bin(), dir, dir),
                 2, "%s", log_of("o"));
    cr_assert(strstr(log_of("o"), "rank 1 differs from rank 0 in: calibration tokens"), "%s", log_of("o"));
    cr_assert_neq(lwqt_sh("ls '%s/o' 2>/dev/null | grep -q safetensors", dir), 0, "a shard was written");
}

/* Issue 36, findings 6 and 7: `mpiexec -n 1 lwq LEFT : -n 1 lwq RIGHT` (in dir, output o.log)
 * under a timeout: a job whose ranks wait for ever is a failure of the test, not a hung test.
 * Returns the job's exit status. */
static int mpmd(const char *left, const char *right)
{
    int rc = lwqt_sh("cd '%s' && timeout -k 5 60 '%s' -n 1 '%s' %s : -n 1 '%s' %s > o.log 2>&1", dir, mpiexec, lwqt_bin(),
                     left, lwqt_bin(), right);
    cr_assert(rc != 124 && rc != 137, "the job hung (killed after 60 s): %s", log_of("o"));
    return rc;
}

/* 0 when nothing was written where the job's output would go */
static int nothing_written(void)
{
    return lwqt_sh("[ ! -e '%s/o' ] && [ ! -e '%s/o.layerwise_resume' ]", dir, dir);
}

/* A rank started with --print-recipe printed and left before MPI started; the other waited in
 * its first agreement for ever.  Now the job fails at once, naming the rank and what it was asked. */
Test(ranks, a_rank_that_prints_the_recipe_does_not_leave_the_others_waiting)
{
    need_mpi();
    mkmodel("llama", "--arch llama");
    int rc = mpmd("quantize llama -o o " CALIB, "quantize llama -o o " CALIB " --print-recipe");
    const char *l = log_of("o");
    cr_assert_eq(rc, 2, "exit %d: %s", rc, l);
    cr_assert(strstr(l, "rank 1 was started as `lwq quantize --print-recipe`, rank 0 as `lwq quantize`"), "%s", l);
    cr_assert_eq(nothing_written(), 0, "the refused job wrote into o: %s", l);
}

/* The same with `lwq plan` on rank 0: rank 0 planned and left, rank 1 waited. */
Test(ranks, a_rank_started_as_plan_does_not_leave_the_others_waiting)
{
    need_mpi();
    mkmodel("llama", "--arch llama");
    int rc = mpmd("plan llama " CALIB, "quantize llama -o o " CALIB);
    const char *l = log_of("o");
    cr_assert_eq(rc, 2, "exit %d: %s", rc, l);
    cr_assert(strstr(l, "rank 1 was started as `lwq quantize`, rank 0 as `lwq plan`"), "%s", l);
    cr_assert_eq(nothing_written(), 0, "the refused job wrote into o: %s", l);
}

/* A rank that asked for the usage printed it and left (exit 0). */
Test(ranks, a_rank_that_asks_for_help_does_not_leave_the_others_waiting)
{
    need_mpi();
    mkmodel("llama", "--arch llama");
    int rc = mpmd("quantize llama -o o " CALIB, "quantize --help");
    const char *l = log_of("o");
    cr_assert_eq(rc, 2, "exit %d: %s", rc, l);
    cr_assert(strstr(l, "rank 1 was started as `lwq quantize --help`, rank 0 as `lwq quantize`"), "%s", l);
}

/* A rank of another lwq command (one that never started MPI: inspect, exit 0) left the quantize
 * rank waiting. */
Test(ranks, a_rank_of_another_command_does_not_leave_the_others_waiting)
{
    need_mpi();
    mkmodel("llama", "--arch llama");
    int rc = mpmd("inspect llama", "quantize llama -o o " CALIB);
    const char *l = log_of("o");
    cr_assert_eq(rc, 2, "exit %d: %s", rc, l);
    cr_assert(strstr(l, "rank 1 was started as `lwq quantize`, rank 0 as `lwq inspect`"), "%s", l);
    cr_assert_eq(nothing_written(), 0, "the refused job wrote into o: %s", l);
}

/* A rank whose command line is refused: the job fails with that rank's message, naming it (before,
 * it left before MPI started and the message did not say which rank). */
Test(ranks, a_rank_that_refuses_its_command_line_is_named)
{
    need_mpi();
    mkmodel("llama", "--arch llama");
    int rc = mpmd("quantize llama -o o " CALIB, "quantize llama -o o " CALIB " --auto-quantize-bits 6 "
                  "--auto-quantize-formats nvfp4,int3");
    const char *l = log_of("o");
    cr_assert_eq(rc, 2, "exit %d: %s", rc, l);
    cr_assert(strstr(l, "rank 1: --auto-quantize-formats: unknown format \"int3\""), "%s", l);
    cr_assert_eq(nothing_written(), 0, "the refused job wrote into o: %s", l);
}

/* Finding 7: one rank with an auto-quantize budget, one without: they met in different collectives
 * (Open MPI: MPI_ERR_TRUNCATE).  Now the first agreement names the rank and the option. */
Test(ranks, ranks_with_different_auto_quantize_options_are_refused_naming_the_option)
{
    need_mpi();
    mkmodel("llama", "--arch llama");
    int rc = mpmd("quantize llama -o o " CALIB, "quantize llama -o o " CALIB " --auto-quantize-bits 6");
    const char *l = log_of("o");
    cr_assert_eq(rc, 2, "exit %d: %s", rc, l);
    cr_assert(!strstr(l, "MPI_ERR"), "%s", l);
    cr_assert(strstr(l, "rank 1 differs from rank 0 in: --auto-quantize-bits (rank 1: 6, rank 0: not given)"), "%s", l);
    cr_assert_eq(nothing_written(), 0, "the refused job wrote into o: %s", l);
}

/* The budget on rank 0 this time, with a second option: every option that differs is named. */
Test(ranks, every_auto_quantize_option_that_differs_is_named)
{
    need_mpi();
    mkmodel("llama", "--arch llama");
    int rc = mpmd("quantize llama -o o " CALIB " --auto-quantize-gb 0.001 --auto-quantize-score kl",
                  "quantize llama -o o " CALIB);
    const char *l = log_of("o");
    cr_assert_eq(rc, 2, "exit %d: %s", rc, l);
    cr_assert(!strstr(l, "MPI_ERR"), "%s", l);
    cr_assert(strstr(l, "rank 1 differs from rank 0 in: --auto-quantize-gb (rank 1: not given, rank 0: 0.001), "
                        "--auto-quantize-score (rank 1: not given, rank 0: kl)"), "%s", l);
    cr_assert_eq(nothing_written(), 0, "the refused job wrote into o: %s", l);
}

/* One job per output: rank 0 holds the run lock for the whole job. */
Test(ranks, an_output_in_use_is_refused)
{
    need_mpi();
    mkmodel("llama", "--arch llama");
    char launch[300];
    snprintf(launch, sizeof launch, "'%s' -n 2", mpiexec);
    cr_assert_eq(lwqt_sh("mkdir -p '%s/o.layerwise_resume' && : > '%s/o.layerwise_resume/lock'", dir, dir), 0);
    cr_assert_eq(lwqt_sh("cd '%s' && flock o.layerwise_resume/lock %s '%s' quantize llama -o o " CALIB " > o.log 2>&1",
                         dir, launch, lwqt_bin()),
                 2);
    cr_assert(strstr(log_of("o"), "in use by another lwq run"), "%s", log_of("o"));
}

Test(ranks, plan_shows_each_ranks_memory)
{
    mkmodel("llama", "--arch llama");
    cr_assert_eq(lwqt_sh("cd '%s' && '%s' plan llama --ranks 3 " CALIB " > o.log 2>&1", dir, lwqt_bin()), 0);
    const char *l = log_of("o");
    cr_assert(strstr(l, "plan: rank 0 of 3: batches [0, 1)") && strstr(l, "plan: rank 2 of 3: batches [3, 4)"), "%s", l);
}
