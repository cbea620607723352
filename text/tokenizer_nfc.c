/* text/tokenizer_nfc.c — Unicode canonical normalization (NFC, NFD) for the tokenizer.json
 * normalizers Qwen-style tokenizers use.  The algorithm of UAX #15: full canonical
 * decomposition (Hangul algorithmically), canonical reordering by combining class, then
 * canonical composition of unblocked pairs into primary composites.  Data: the generated
 * text/tokenizer_nfc_table.h (Unicode version in TOK_UNICODE_VERSION). */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_internal.h"
#include "text/tokenizer_nfc_table.h"

enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7, LCOUNT = 19, VCOUNT = 21,
       TCOUNT = 28, NCOUNT = VCOUNT * TCOUNT, SCOUNT = LCOUNT * NCOUNT };

static unsigned ccc_of(uint32_t c)
{
    if (c < 0x300) return 0;
    size_t lo = 0, hi = sizeof tok_nfc_ccc / sizeof tok_nfc_ccc[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (tok_nfc_ccc[mid][0] == c) return tok_nfc_ccc[mid][1];
        if (tok_nfc_ccc[mid][0] < c) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

static const uint32_t *decomp_of(uint32_t c)
{
    if (c < 0xC0) return NULL;
    size_t lo = 0, hi = sizeof tok_nfc_decomp / sizeof tok_nfc_decomp[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (tok_nfc_decomp[mid][0] == c) return tok_nfc_decomp[mid];
        if (tok_nfc_decomp[mid][0] < c) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

static uint32_t compose(uint32_t a, uint32_t b)
{
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE && b < TBASE + TCOUNT)
        return a + (b - TBASE);
    uint64_t key = ((uint64_t)a << 32) | b;
    size_t lo = 0, hi = sizeof tok_nfc_comp / sizeof tok_nfc_comp[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint64_t k = ((uint64_t)tok_nfc_comp[mid][0] << 32) | tok_nfc_comp[mid][1];
        if (k == key) return tok_nfc_comp[mid][2];
        if (k < key) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

typedef struct { uint32_t *v; size_t n, cap; } cpvec;

static int cp_push(cpvec *c, uint32_t cp)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        uint32_t *p = realloc(c->v, cap * sizeof *p);
        if (!p) return LWQ_ENOMEM;
        c->v = p;
        c->cap = cap;
    }
    c->v[c->n++] = cp;
    return 0;
}

static int decompose(uint32_t c, cpvec *out, int depth)
{
    if (c >= SBASE && c < SBASE + SCOUNT) {
        uint32_t s = c - SBASE, t = s % TCOUNT;
        int rc = cp_push(out, LBASE + s / NCOUNT);
        if (!rc) rc = cp_push(out, VBASE + (s % NCOUNT) / TCOUNT);
        if (!rc && t) rc = cp_push(out, TBASE + t);
        return rc;
    }
    const uint32_t *d = depth < 8 ? decomp_of(c) : NULL;
    if (!d) return cp_push(out, c);
    int rc = decompose(d[1], out, depth + 1);
    if (!rc && d[2]) rc = decompose(d[2], out, depth + 1);
    return rc;
}

/* `compose_too`: NFC; otherwise NFD. */
int tok_unicode_normalize(const char *s, size_t n, int compose_too, tok_buf *out)
{
    out->n = 0;
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    /* Below U+0300 nothing decomposes under NFC and nothing composes, so such text is done. */
    while (i < n && (u[i] < 0xCC || !compose_too)) {
        if (!compose_too && u[i] >= 0xC3) break; /* NFD: Latin-1 letters decompose */
        i++;
    }
    if (i == n) return tok_buf_put(out, s, n);
    cpvec c = {0};
    int rc = 0;
    for (i = 0; i < n && !rc;) {
        uint32_t cp;
        int l = tok_utf8_decode(u + i, n - i, &cp);
        if (l <= 0) { rc = LWQ_EINVAL; break; } /* the caller validated UTF-8 */
        rc = decompose(cp, &c, 0);
        i += (size_t)l;
    }
    /* Canonical reordering: stable sort of each run of non-starters by class. */
    for (size_t k = 1; !rc && k < c.n; k++) {
        uint32_t x = c.v[k];
        unsigned cx = ccc_of(x);
        if (!cx) continue;
        size_t j = k;
        while (j > 0 && ccc_of(c.v[j - 1]) > cx) {
            c.v[j] = c.v[j - 1];
            j--;
        }
        c.v[j] = x;
    }
    size_t w = c.n;
    if (!rc && compose_too && c.n) {
        /* A char composes with the last starter unless a char between them is a starter or
         * has a class >= its own (it is "blocked"). */
        size_t starter = ccc_of(c.v[0]) == 0 ? 0 : SIZE_MAX;
        unsigned last_cc = ccc_of(c.v[0]);
        w = 1;
        for (size_t k = 1; k < c.n; k++) {
            uint32_t x = c.v[k];
            unsigned cx = ccc_of(x);
            int adjacent = starter != SIZE_MAX && starter == w - 1;
            if (starter != SIZE_MAX && (adjacent || (cx && last_cc < cx))) {
                uint32_t comp = compose(c.v[starter], x);
                if (comp) {
                    c.v[starter] = comp;
                    continue;
                }
            }
            if (!cx) starter = w;
            last_cc = cx;
            c.v[w++] = x;
        }
    }
    for (size_t k = 0; !rc && k < w; k++) {
        char b[4];
        rc = tok_buf_put(out, b, tok_utf8_encode(c.v[k], b));
    }
    if (!rc) rc = tok_buf_put(out, "", 0);
    free(c.v);
    return rc;
}
