/* engine/eval/eval_experts.c — per routed expert, in a candidate stream's MoE layer: the relative
 * output error ||E_q(x) - E_src(x)||^2 / ||E_src(x)||^2 over the tokens the candidate routed to
 * it, x being the expert's input in the candidate stream.  An observer on the candidate's forward
 * sees each expert's input (the rows routed to it) at its gate projection and runs the expert
 * twice beside the forward: with the source weights on the plain backend, and with the
 * candidate's weights through the emulating backend (engine/eval/emul/eval_emul.h).  This doubles the
 * candidate's expert compute on MoE layers, and nothing else. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eval/eval_experts.h"

static int find(const lwq_arch_layer *p, int expert, lwq_linear_role role)
{
    for (int i = 0; i < p->nlinears; i++)
        if (p->linears[i].expert == expert && p->linears[i].role == role)
            return i;
    return -1;
}

static int fetch(const lwq_weights *w, const lwq_names *names, const char *module, lwq_tensor *t, lwq_error *e)
{
    char n[640], canon[600];
    snprintf(n, sizeof n, "%s.weight", lwq_names_canon(names, module, canon, sizeof canon) ? canon : module);
    int rc = w->get(w->ctx, n, t, e);
    return rc == LWQ_ENOENT ? lwq_errf(e, LWQ_ENOENT, "tensor %s is missing", n) : rc;
}

/* y (n, D) act = down(silu(gate(x)) * up(x)) on backend be. */
static int expert_out(const lwq_backend *be, lwq_dtype act, const lwq_tensor *x, const lwq_tensor *wg,
                      const lwq_tensor *wu, const lwq_tensor *wd, float *host_y, lwq_error *e)
{
    int64_t n = x->shape[0], I = wg->shape[0], D = wd->shape[0];
    int64_t sg[2] = {n, I}, sy[2] = {n, D};
    lwq_tensor g = {0}, u = {0}, y = {0};
    int rc = lwq_backend_tensor_alloc(be, act, 2, sg, &g, e);
    if (rc == 0)
        rc = lwq_backend_tensor_alloc(be, act, 2, sg, &u, e);
    if (rc == 0)
        rc = lwq_backend_tensor_alloc(be, act, 2, sy, &y, e);
    if (rc == 0 && (rc = lwq_backend_gemm(be, x, wg, NULL, &g, e)) == 0 &&
        (rc = lwq_backend_gemm(be, x, wu, NULL, &u, e)) == 0 && (rc = lwq_backend_swiglu(be, &g, &u, &g, e)) == 0 &&
        (rc = lwq_backend_gemm(be, &g, wd, NULL, &y, e)) == 0) {
        size_t bytes = (size_t)(n * D) * lwq_dtype_size(act);
        void *h = be->ops->device == LWQ_DEV_CPU ? y.data : malloc(bytes ? bytes : 1);
        if (!h)
            rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
        else if (h != y.data)
            rc = lwq_backend_download(be, h, y.data, bytes, e);
        for (int64_t i = 0; rc == 0 && i < n * D; i++)
            host_y[i] = lwq_load_f(h, act, (size_t)i);
        if (h && h != y.data)
            free(h);
    }
    if (g.data)
        lwq_backend_tensor_free(be, &g);
    if (u.data)
        lwq_backend_tensor_free(be, &u);
    if (y.data)
        lwq_backend_tensor_free(be, &y);
    return rc;
}

static int on_input(void *ctx, int layer, const char *module, const lwq_tensor *x, const lwq_tensor *valid,
                    const int32_t *tok, lwq_error *e)
{
    lwq_eval_experts *X = ctx;
    (void)layer;
    (void)tok;
    (void)valid; /* an expert's rows are the real tokens routed to it */
    char full[640];
    lwq_names_full(X->names, module, full, sizeof full);
    const lwq_arch_layer *p = X->plan;
    int gi = -1;
    for (int i = 0; i < p->nlinears && gi < 0; i++)
        if (p->linears[i].role == LWQ_ROLE_EXPERT_GATE && !strcmp(p->linears[i].name, full))
            gi = i;
    if (gi < 0 || x->shape[0] == 0)
        return 0;
    int ex = p->linears[gi].expert, ui = find(p, ex, LWQ_ROLE_EXPERT_UP), di = find(p, ex, LWQ_ROLE_EXPERT_DOWN);
    if (ex < 0 || ex >= X->n || ui < 0 || di < 0)
        return lwq_errf(e, LWQ_EINVAL, "%s: expert %d has no up/down projection in the layer plan", full, ex);
    lwq_tensor sg, su, sd, qg, qu, qd;
    int rc;
    if ((rc = fetch(X->wsrc, X->names, p->linears[gi].name, &sg, e)) != 0 ||
        (rc = fetch(X->wsrc, X->names, p->linears[ui].name, &su, e)) != 0 ||
        (rc = fetch(X->wsrc, X->names, p->linears[di].name, &sd, e)) != 0 ||
        (rc = fetch(X->wq, X->names, p->linears[gi].name, &qg, e)) != 0 ||
        (rc = fetch(X->wq, X->names, p->linears[ui].name, &qu, e)) != 0 ||
        (rc = fetch(X->wq, X->names, p->linears[di].name, &qd, e)) != 0)
        return rc;
    int64_t n = x->shape[0], D = sd.shape[0];
    float *ys = malloc((size_t)(n * D) * sizeof *ys + 1), *yq = malloc((size_t)(n * D) * sizeof *yq + 1);
    rc = ys && yq ? 0 : lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", full);
    if (rc == 0)
        rc = expert_out(X->src_be, X->act, x, &sg, &su, &sd, ys, e);
    if (rc == 0)
        rc = expert_out(X->q_be, X->act, x, &qg, &qu, &qd, yq, e);
    if (rc == 0) {
        double num = 0, den = 0;
        for (int64_t i = 0; i < n * D; i++) {
            double d = (double)yq[i] - ys[i];
            num += d * d;
            den += (double)ys[i] * ys[i];
        }
        X->num[ex] += num;
        X->den[ex] += den;
        X->tokens[ex] += n;
    }
    free(ys);
    free(yq);
    return rc;
}

int lwq_eval_experts_init(lwq_eval_experts *X, const lwq_arch_layer *plan, int n_experts, const lwq_names *names,
                          const lwq_backend *src_be, const lwq_backend *q_be, lwq_dtype act, const lwq_weights *wsrc,
                          const lwq_weights *wq, lwq_error *e)
{
    memset(X, 0, sizeof *X);
    X->plan = plan;
    X->n = n_experts;
    X->names = names;
    X->src_be = src_be;
    X->q_be = q_be;
    X->act = act;
    X->wsrc = wsrc;
    X->wq = wq;
    X->num = calloc((size_t)(n_experts > 0 ? n_experts : 1), sizeof *X->num);
    X->den = calloc((size_t)(n_experts > 0 ? n_experts : 1), sizeof *X->den);
    X->tokens = calloc((size_t)(n_experts > 0 ? n_experts : 1), sizeof *X->tokens);
    if (!X->num || !X->den || !X->tokens) {
        lwq_eval_experts_free(X);
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    }
    X->obs.ctx = X;
    X->obs.linear_input = on_input;
    return 0;
}

void lwq_eval_experts_worst(const lwq_eval_experts *X, lwq_eval_layer *out)
{
    out->nworst = 0;
    for (int ex = 0; ex < X->n; ex++) {
        if (X->tokens[ex] == 0)
            continue;
        double r = X->den[ex] > 0 ? X->num[ex] / X->den[ex] : (X->num[ex] > 0 ? INFINITY : 0);
        /* insertion into the top LWQ_EVAL_WORST, largest first; ties keep the lower index */
        int k = out->nworst < LWQ_EVAL_WORST ? out->nworst++ : LWQ_EVAL_WORST;
        while (k > 0 && out->worst[k - 1].rel_err < r) {
            if (k < LWQ_EVAL_WORST)
                out->worst[k] = out->worst[k - 1];
            k--;
        }
        if (k < LWQ_EVAL_WORST) {
            out->worst[k].expert = ex;
            out->worst[k].rel_err = r;
            out->worst[k].tokens = X->tokens[ex];
        }
    }
}

void lwq_eval_experts_free(lwq_eval_experts *X)
{
    free(X->num);
    free(X->den);
    free(X->tokens);
    X->num = X->den = NULL;
    X->tokens = NULL;
}
