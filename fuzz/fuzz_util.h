/* fuzz/fuzz_util.h — what the libFuzzer harnesses of fuzz/ share.
 *
 * Each harness (fuzz/fuzz_<parser>.c) feeds one fuzz input to one of lwq's parsers of hostile
 * files, the way the tools call it, and aborts (a crash libFuzzer reports) when the parser breaks
 * its own contract: a failure with no message, or a success whose result a caller could not
 * trust.  Memory errors, undefined behaviour and leaks are found by ASan + UBSan + LSan, which
 * scripts/fuzz.sh builds in.  Seeds: tests/data/fuzz/<harness>/ (fuzz/make-seeds.sh writes them).
 *
 * Harnesses whose parser reads several files (a YAML recipe and its imports, a quantized
 * checkpoint directory, a calibration directory) take an archive of files, one after the other:
 *
 *     ==> NAME <==
 *     bytes of NAME, up to the newline before the next "==> " header line
 *
 * (what `head` prints for several files, so `head -c 1M a b c` makes one).  Text before the first
 * header is the harness's main file.  NAME is a relative path of [A-Za-z0-9._-/] without "..";
 * an input with any other name is skipped, so every kept input maps to one set of files.
 *
 * Files go to a private directory under $TMPDIR (or /dev/shm, else /tmp), removed at exit. */
#ifndef LWQ_FUZZ_UTIL_H
#define LWQ_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "core/sys/error.h"

#define LWQ_FUZZ_MAX_FILES 16

typedef struct lwq_fuzz_file {
    char name[256];
    const uint8_t *data; /* points into the fuzz input */
    size_t len;
} lwq_fuzz_file;

/* Split `d` into files (main: the name of text before the first header).  Returns the number of
 * files, 0 for an input to skip (a bad name, too many files).  A later file of the same name
 * replaces the earlier one. */
int lwq_fuzz_split(const uint8_t *d, size_t n, const char *main, lwq_fuzz_file *f, int max);
/* Write the files under `dir` (subdirectories made as needed).  0, or -1 when a name is also
 * another file's directory ("a" and "a/b"): an input to skip. */
int lwq_fuzz_write(const char *dir, const lwq_fuzz_file *f, int n);
/* The file called `name`, or NULL. */
const lwq_fuzz_file *lwq_fuzz_get(const lwq_fuzz_file *f, int n, const char *name);

/* The harness's scratch directory "<tmp>/lwq-fuzz-PID/<sub>", made empty; the same path on
 * every call with the same sub. */
const char *lwq_fuzz_scratch(const char *sub);
/* A NUL-terminated malloc'd copy (abort on out of memory). */
char *lwq_fuzz_cstr(const uint8_t *d, size_t n);
/* tests/data/fuzz/<sub>: $LWQ_FUZZ_DATA/<sub> when set, else from the source tree. */
const char *lwq_fuzz_data(const char *sub);

/* The contract every parser keeps: rc < 0 comes with a message naming the thing.  Aborts with
 * `what` and the code otherwise.  With LWQ_FUZZ_VERBOSE set, prints every message (to see why a
 * seed is refused). */
void lwq_fuzz_check_error(int rc, const lwq_error *e, const char *what);
/* abort() with a message: a broken invariant in what a parser returned. */
void lwq_fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Silence lwq's log (the harnesses call parsers millions of times). */
void lwq_fuzz_quiet(void);

struct lwq_recipe;
/* What the engine does with a parsed recipe: resolve module names of every architecture (with and
 * without the MLA fact), KV cache checks of attention modules, and the canonical JSON, which must
 * parse back to a recipe with the same canonical JSON (recipe.h's promise; the run fingerprint
 * hashes it). */
void lwq_fuzz_recipe_check(const struct lwq_recipe *r);

#endif
