/* engine/quant/dist_pack: a rank's tensors as one blob, and pieces of a linear joined back into the whole tensor. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant/dist.h"

/* A piece of "w": rows [row0, row0 + rows) of an 8 x 4 U8 tensor whose byte (i, j) is 4 i + j. */
static void add_piece(lwq_tlist *l, int64_t row0, int64_t rows)
{
    uint8_t *d = malloc((size_t)(rows * 4));
    for (int64_t i = 0; i < rows * 4; i++)
        d[i] = (uint8_t)(row0 * 4 + i);
    int64_t shape[2] = {rows, 4};
    cr_assert_eq(lwq_tlist_add(l, "w", LWQ_U8, 2, shape, d, 1, NULL), 0);
    if (rows != 8) {
        l->v[l->n - 1].row0 = row0;
        l->v[l->n - 1].rows_all = 8;
    }
}

static void blob_of(lwq_tlist *l, void **blob, uint64_t *bytes)
{
    lwq_qlayer_report rep = {0};
    cr_assert_eq(lwq_dist_pack(l, 0, &rep, blob, bytes, NULL), 0);
}

Test(dist_pack, pieces_from_several_ranks_join_into_the_whole_tensor)
{
    lwq_tlist own = {0}, r1 = {0}, r2 = {0};
    add_piece(&own, 0, 3);
    add_piece(&r1, 3, 4);
    add_piece(&r2, 7, 1);
    void *b1, *b2;
    uint64_t n1, n2;
    blob_of(&r1, &b1, &n1);
    blob_of(&r2, &b2, &n2);
    lwq_dist_join j = {0};
    lwq_qlayer_report rep = {0};
    cr_assert_eq(lwq_dist_join_own(&own, &j, NULL), 0);
    cr_assert_eq(lwq_dist_unpack(b1, n1, 1, &own, &rep, &j, NULL), 0);
    cr_assert_eq(lwq_dist_unpack(b2, n2, 2, &own, &rep, &j, NULL), 0);
    cr_assert_eq(lwq_dist_join_end(&j, &own, 0, NULL), 0);
    cr_assert_eq(own.n, 1);
    const lwq_htensor *t = &own.v[0];
    cr_assert(t->shape[0] == 8 && t->shape[1] == 4 && t->nbytes == 32 && t->rows_all == 0);
    for (int i = 0; i < 32; i++)
        cr_assert_eq(((const uint8_t *)t->data)[i], i, "byte %d", i);
    free(b1);
    free(b2);
    lwq_tlist_free(&own);
    lwq_tlist_free(&r1);
    lwq_tlist_free(&r2);
}

/* Every count of a rank's part of the layer report reaches rank 0's report.  Before, the count
 * of local_hessian's cold-expert linears (hessian_fallback) stayed on the rank that had it. */
Test(dist_pack, every_count_of_a_ranks_report_is_added_to_rank_0s)
{
    lwq_tlist r1 = {0}, got = {0};
    add_piece(&r1, 0, 8);
    lwq_qlayer_report sent = {.quantized = 5, .zero_weights = 1, .gptq_fallback = 2, .hessian_fallback = 3};
    void *b;
    uint64_t n;
    cr_assert_eq(lwq_dist_pack(&r1, 0, &sent, &b, &n, NULL), 0);
    lwq_qlayer_report rep = {.quantized = 1, .hessian_fallback = 1};
    lwq_dist_join j = {0};
    cr_assert_eq(lwq_dist_unpack(b, n, 1, &got, &rep, &j, NULL), 0);
    cr_assert_eq(lwq_dist_join_end(&j, &got, 0, NULL), 0);
    cr_assert_eq(rep.quantized, 6);
    cr_assert_eq(rep.zero_weights, 1);
    cr_assert_eq(rep.gptq_fallback, 2);
    cr_assert_eq(rep.hessian_fallback, 4, "hessian_fallback %d, expected 1 + 3", rep.hessian_fallback);
    free(b);
    lwq_tlist_free(&r1);
    lwq_tlist_free(&got);
}

Test(dist_pack, a_piece_that_does_not_follow_the_rows_before_it_is_refused)
{
    lwq_tlist r0 = {0}, r1 = {0}, got = {0};
    add_piece(&r0, 0, 3);
    add_piece(&r1, 4, 4); /* row 3 missing */
    void *b0, *b1;
    uint64_t n0, n1;
    blob_of(&r0, &b0, &n0);
    blob_of(&r1, &b1, &n1);
    lwq_dist_join j = {0};
    lwq_qlayer_report rep = {0};
    lwq_error e = {0};
    cr_assert_eq(lwq_dist_unpack(b0, n0, 0, &got, &rep, &j, NULL), 0);
    cr_assert_eq(lwq_dist_unpack(b1, n1, 1, &got, &rep, &j, &e), LWQ_EFORMAT);
    cr_assert(strstr(e.msg, "rank 1: w rows [4, 8) do not follow the 3 rows before them"), "%s", e.msg);
    lwq_dist_join_end(&j, &got, -1, NULL);
    free(b0);
    free(b1);
    lwq_tlist_free(&r0);
    lwq_tlist_free(&r1);
    lwq_tlist_free(&got);
}

Test(dist_pack, a_tensor_whose_last_rows_never_came_is_an_error)
{
    lwq_tlist own = {0};
    add_piece(&own, 0, 5);
    lwq_dist_join j = {0};
    lwq_error e = {0};
    cr_assert_eq(lwq_dist_join_own(&own, &j, NULL), 0);
    cr_assert_eq(lwq_dist_join_end(&j, &own, 0, &e), LWQ_ESTATE);
    cr_assert(strstr(e.msg, "w: the ranks sent rows [0, 5) of 8"), "%s", e.msg);
    lwq_tlist_free(&own);
}

/* One piece, rows [row0, row0 + rows), sent by `rank` as a blob short of `cut` bytes, to an empty
 * list: the unpack fails with LWQ_EFORMAT and a message holding msg. */
static void unpack_refused(int64_t row0, int64_t rows, uint64_t cut, int rank, const char *msg)
{
    lwq_tlist sent = {0}, got = {0};
    add_piece(&sent, row0, rows);
    void *b;
    uint64_t n;
    blob_of(&sent, &b, &n);
    lwq_dist_join j = {0};
    lwq_qlayer_report rep = {0};
    lwq_error e = {0};
    cr_assert_eq(lwq_dist_unpack(b, n - cut, rank, &got, &rep, &j, &e), LWQ_EFORMAT);
    cr_assert(strstr(e.msg, msg), "%s", e.msg);
    lwq_dist_join_end(&j, &got, -1, NULL);
    free(b);
    lwq_tlist_free(&sent);
    lwq_tlist_free(&got);
}

Test(dist_pack, a_piece_before_its_row_0_is_refused)
{
    unpack_refused(2, 6, 0, 1, "rank 1: w rows [2, 8) came before its row 0");
}

Test(dist_pack, a_truncated_blob_is_refused_naming_the_rank)
{
    unpack_refused(0, 8, 1, 3, "rank 3 sent a truncated blob");
}
