/* core/data/hash.h — XXH64 (the xxHash 64-bit algorithm, seed 0 by default), one-shot and streaming.
 * Used for shard checksums in the resume manifest and for run fingerprints: fast enough
 * (several GB/s) that checksumming a layer's shard never shows next to writing it.  Not a
 * cryptographic hash: it guards against torn and corrupted files, not against an adversary. */
#ifndef LWQ_CORE_HASH_H
#define LWQ_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct lwq_xxh64_state {
    uint64_t v[4];
    uint64_t total;
    uint64_t seed;
    unsigned char buf[32];
    size_t nbuf;
} lwq_xxh64_state;

void lwq_xxh64_init(lwq_xxh64_state *s, uint64_t seed);
void lwq_xxh64_update(lwq_xxh64_state *s, const void *data, size_t len);
uint64_t lwq_xxh64_digest(const lwq_xxh64_state *s);
uint64_t lwq_xxh64(const void *data, size_t len, uint64_t seed);
/* 16 lowercase hex digits + NUL. */
void lwq_hex64(uint64_t h, char out[17]);

#endif
