/* engine/run/spill.h — a streamed layer's quantized expert tensors, parked on disk until its shard is
 * written, so quantized experts do not pile up in memory (expert streaming, engine/source/units.h).
 *
 * One unnamed file per layer in the resume directory (created, then unlinked at once: a crash
 * leaves nothing behind; a kill inside a layer recomputes the layer).  lwq_spill_move appends the
 * bytes of the large tensors of an output list to it, frees them and marks them `spilled` with
 * their offset; the shard serializer reads them back with lwq_spill_read in name order.
 *
 * Ownership: the spill owns its descriptor; lwq_spill_close closes it (the space is freed then).
 * One thread at a time: the engine appends, then hands the spill to the writer thread. */
#ifndef LWQ_ENGINE_SPILL_H
#define LWQ_ENGINE_SPILL_H

#include <stddef.h>
#include <stdint.h>

#include "core/sys/error.h"
#include "engine/source/tlist.h"

/* Tensors at least this large are spilled; scalars and small scales stay in memory. */
#define LWQ_SPILL_MIN_BYTES ((uint64_t)4096)

typedef struct lwq_spill {
    int fd;              /* -1 when closed */
    uint64_t size;       /* bytes appended */
    char path[4096];     /* for messages (the name is unlinked) */
} lwq_spill;

int lwq_spill_open(lwq_spill *s, const char *dir, int layer, lwq_error *e);
/* Spill out->v[from..n) of at least LWQ_SPILL_MIN_BYTES: their bytes are written, owned data is
 * freed, views are dropped (the caller may then release what they viewed). */
int lwq_spill_move(lwq_spill *s, lwq_tlist *out, int from, lwq_error *e);
int lwq_spill_read(const lwq_spill *s, uint64_t off, void *buf, size_t n, lwq_error *e);
void lwq_spill_close(lwq_spill *s);

#endif
