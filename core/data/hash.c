#include "core/data/hash.h"

#include <stdio.h>
#include <string.h>

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t rd64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8); /* little-endian host assumed (x86-64, aarch64) */
    return v;
}

static inline uint32_t rd32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint64_t round1(uint64_t acc, uint64_t in)
{
    acc += in * P2;
    acc = rotl(acc, 31);
    return acc * P1;
}

static inline uint64_t merge(uint64_t acc, uint64_t v)
{
    acc ^= round1(0, v);
    return acc * P1 + P4;
}

void lwq_xxh64_init(lwq_xxh64_state *s, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->seed = seed;
    s->v[0] = seed + P1 + P2;
    s->v[1] = seed + P2;
    s->v[2] = seed;
    s->v[3] = seed - P1;
}

void lwq_xxh64_update(lwq_xxh64_state *s, const void *data, size_t len)
{
    const unsigned char *p = data;
    s->total += len;
    if (s->nbuf + len < 32) {
        memcpy(s->buf + s->nbuf, p, len);
        s->nbuf += len;
        return;
    }
    if (s->nbuf) {
        size_t k = 32 - s->nbuf;
        memcpy(s->buf + s->nbuf, p, k);
        for (int i = 0; i < 4; i++)
            s->v[i] = round1(s->v[i], rd64(s->buf + 8 * i));
        p += k;
        len -= k;
        s->nbuf = 0;
    }
    uint64_t v0 = s->v[0], v1 = s->v[1], v2 = s->v[2], v3 = s->v[3];
    while (len >= 32) {
        v0 = round1(v0, rd64(p));
        v1 = round1(v1, rd64(p + 8));
        v2 = round1(v2, rd64(p + 16));
        v3 = round1(v3, rd64(p + 24));
        p += 32;
        len -= 32;
    }
    s->v[0] = v0, s->v[1] = v1, s->v[2] = v2, s->v[3] = v3;
    memcpy(s->buf, p, len);
    s->nbuf = len;
}

uint64_t lwq_xxh64_digest(const lwq_xxh64_state *s)
{
    uint64_t h;
    if (s->total >= 32) {
        h = rotl(s->v[0], 1) + rotl(s->v[1], 7) + rotl(s->v[2], 12) + rotl(s->v[3], 18);
        for (int i = 0; i < 4; i++)
            h = merge(h, s->v[i]);
    } else {
        h = s->seed + P5;
    }
    h += s->total;
    const unsigned char *p = s->buf;
    size_t len = s->nbuf;
    while (len >= 8) {
        h ^= round1(0, rd64(p));
        h = rotl(h, 27) * P1 + P4;
        p += 8;
        len -= 8;
    }
    if (len >= 4) {
        h ^= (uint64_t)rd32(p) * P1;
        h = rotl(h, 23) * P2 + P3;
        p += 4;
        len -= 4;
    }
    while (len--) {
        h ^= (*p++) * P5;
        h = rotl(h, 11) * P1;
    }
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

uint64_t lwq_xxh64(const void *data, size_t len, uint64_t seed)
{
    lwq_xxh64_state s;
    lwq_xxh64_init(&s, seed);
    lwq_xxh64_update(&s, data, len);
    return lwq_xxh64_digest(&s);
}

void lwq_hex64(uint64_t h, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)h); }
