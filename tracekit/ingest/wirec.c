/* tracekit.ingest.wirec: a bounds-checked decoder for the XSpace wire format (tracekit/proto/xplane.proto).
 * Written for tracekit; see tracekit/ingest/wire.py for the Python-facing API and the pure-Python twin.
 *
 * read_space(buffer, threads=1, max_events=-1, budget=-1, weights=(0, 0, 0, 0, 0), max_stats=-1)
 *   -> (planes, hostnames)
 *   planes:    list of (id, name, head, lines)
 *     head:    bytes, the plane's own fields minus every `lines` (field 3) entry, in their original order,
 *              ready for XPlane.FromString (metadata maps and plane stats stay upb's business)
 *     lines:   list of (id, name, display_name, timestamp_ns, duration_ps, display_id,
 *                       metadata_id, offset_ps, event_duration_ps,   -- Buffer: int64 x n_events
 *                       stat_event, stat_id, stat_kind, stat_int,    -- Buffer: int32, int64, int8, int64,
 *                       stat_double, stat_str)                           float64 x n_stats; list
 *   hostnames: list of str
 *   Buffer: writable memory exposed through the buffer protocol (numpy.frombuffer views it, no copy).
 *
 * Decoding follows protobuf semantics for the fields read: the last occurrence of a scalar wins, the last
 * member set wins inside a oneof, unknown fields (wire types 0, 1, 2, 5) are skipped. It is stricter than a
 * general decoder on input no writer produces: a known field with an unexpected wire type, group wire types
 * (3, 4), wire types 6/7, field number 0, tags longer than 5 bytes or over 32 bits, varints over 10 bytes,
 * lengths past the end of the enclosing message and invalid UTF-8 in string fields all raise
 * ValueError("... at byte N"), N being the offset in the input buffer. Nothing is ever read outside the input
 * buffer, and no varint, tag or payload is accepted unless it ends inside its enclosing message. The
 * pure-Python decoder in wire.py follows the same rules, byte for byte.
 *
 * Limits, counted while reading, before the memory they stand for is allocated: `max_events` (-1: none) bounds
 * the events, `max_stats` (-1: none) the stats, `budget` (-1: none) the work, where weights = (plane, metadata
 * entry, line, event, stat) give what each costs. Planes, metadata entries, lines and events are counted in phase
 * 1 (before a line's columns are allocated), stats in phase 2 (before a line's stat columns grow). Over a limit:
 * LimitError(kind, count, limit, planes, lines, events, stats), kind "events", "stats" or "work". Whether a
 * valid input passes depends only on the input.
 *
 * A memory-mapped input whose file shrinks while it is read (SIGBUS on the pages past the new end) raises
 * InputChanged instead of killing the process (POSIX: a SIGBUS handler, armed only while this decoder reads,
 * jumps back out; any other SIGBUS goes to the handler that was there before).
 *
 * Work happens in three phases so that the bulk of it runs without the GIL, optionally on several threads:
 *   1. (GIL) walk XSpace -> XPlane -> XLine framing: line scalars and names, event counts, plane heads;
 *      allocate each line's event columns (exact sizes) and empty stat columns;
 *   2. (no GIL, `threads` workers over the lines, largest first) decode events and their stats;
 *   3. (GIL) report the first error, create the stat strings, build the result.
 * Which error is reported does not depend on the number of threads.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <setjmp.h>
#include <signal.h>
#define HAVE_BUS_GUARD 1
#else
#define HAVE_BUS_GUARD 0
#endif
#if !defined(_WIN32)
#include <pthread.h>
#define HAVE_THREADS 1
#else
#define HAVE_THREADS 0
#endif

#if defined(__GNUC__) || defined(__clang__)
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define INLINE static inline __attribute__((always_inline))
#define NOINLINE static __attribute__((noinline))
#else
#define LIKELY(x) (x)
#define UNLIKELY(x) (x)
#define INLINE static inline
#define NOINLINE static
#endif

typedef const uint8_t *cptr;

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_I32 = 5 };

#define TAG(f, wt) (((uint64_t)(f) << 3) | (uint64_t)(wt))

/* Known field numbers of each message (bit f set = field f is declared): a known field met with another
 * wire type than the declared one is an error; unknown fields are skipped. */
#define BIT(f) (1ull << (f))
static const uint64_t KNOWN_SPACE = BIT(1) | BIT(2) | BIT(3) | BIT(4);
static const uint64_t KNOWN_PLANE = BIT(1) | BIT(2) | BIT(3) | BIT(4) | BIT(5) | BIT(6);
static const uint64_t KNOWN_LINE = BIT(1) | BIT(2) | BIT(3) | BIT(4) | BIT(9) | BIT(10) | BIT(11);
static const uint64_t KNOWN_EVENT = BIT(1) | BIT(2) | BIT(3) | BIT(4) | BIT(5);
static const uint64_t KNOWN_STAT = BIT(1) | BIT(2) | BIT(3) | BIT(4) | BIT(5) | BIT(6) | BIT(7);

/* ==== output buffers ===================================================================================== */

/* A growable, writable block of memory exposed through the buffer protocol. Only resized while decoding,
 * before anyone can see it; resizing uses no Python API (safe without the GIL).
 *
 * On Linux, blocks from MAP_MIN bytes up live in their own anonymous mapping and grow or shrink with mremap,
 * which moves page tables instead of copying: the stat columns, whose final size is known only at the end of
 * a line, then cost no copy and no page faults beyond the pages actually written. Elsewhere, realloc. */
typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len; /* bytes exposed */
    Py_ssize_t cap; /* bytes allocated */
    int mapped;     /* data is an mmap of cap bytes (cap a multiple of PAGE) */
} WBuf;

static PyTypeObject WBufType;

#if defined(__linux__) && defined(MREMAP_MAYMOVE)
#define USE_MREMAP 1
#define MAP_MIN ((Py_ssize_t)256 << 10)
#define PAGE_ROUND(n) (((n) + 4095) & ~(Py_ssize_t)4095)
#else
#define USE_MREMAP 0
#endif

/* Grow to at least `need` bytes (amortized doubling). 0, or -1 when out of memory (no exception set). */
static int
wbuf_reserve(WBuf *b, Py_ssize_t need)
{
    if (need <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap < 64 ? 64 : b->cap;
    while (cap < need) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
#if USE_MREMAP
    if (cap >= MAP_MIN) {
        void *d;
        cap = PAGE_ROUND(cap);
        if (b->mapped)
            d = mremap(b->data, (size_t)b->cap, (size_t)cap, MREMAP_MAYMOVE);
        else {
            d = mmap(NULL, (size_t)cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (d != MAP_FAILED && b->data) {
                memcpy(d, b->data, (size_t)b->cap);
                free(b->data);
            }
        }
        if (d == MAP_FAILED)
            return -1;
        b->data = (char *)d;
        b->cap = cap;
        b->mapped = 1;
        return 0;
    }
#endif
    char *d = (char *)realloc(b->data, (size_t)cap);
    if (!d)
        return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

/* New empty buffer with room for `cap` bytes (GIL held). NULL with an exception set on failure. */
static WBuf *
wbuf_new(Py_ssize_t cap)
{
    WBuf *b = PyObject_New(WBuf, &WBufType);
    if (!b)
        return NULL;
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->mapped = 0;
    if (wbuf_reserve(b, cap < 16 ? 16 : cap) < 0) {
        Py_DECREF(b);
        PyErr_NoMemory();
        return NULL;
    }
    return b;
}

/* Give back the unused tail of a buffer that was grown by doubling. */
static void
wbuf_shrink(WBuf *b)
{
#if USE_MREMAP
    if (b->mapped) {
        Py_ssize_t cap = PAGE_ROUND(b->len < 16 ? 16 : b->len);
        if (cap < b->cap) {
            void *d = mremap(b->data, (size_t)b->cap, (size_t)cap, 0);
            if (d != MAP_FAILED) {
                b->data = (char *)d;
                b->cap = cap;
            }
        }
        return;
    }
#endif
    if (b->cap > 4096 && b->len < b->cap - b->cap / 8) {
        Py_ssize_t cap = b->len < 16 ? 16 : b->len;
        char *d = (char *)realloc(b->data, (size_t)cap);
        if (d) {
            b->data = d;
            b->cap = cap;
        }
    }
}

static void
wbuf_dealloc(WBuf *b)
{
#if USE_MREMAP
    if (b->mapped)
        munmap(b->data, (size_t)b->cap);
    else
#endif
        free(b->data);
    PyObject_Free(b);
}

static int
wbuf_getbuffer(WBuf *b, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)b, b->data, b->len, 0, flags);
}

static Py_ssize_t
wbuf_length(WBuf *b)
{
    return b->len;
}

static PyBufferProcs wbuf_as_buffer = {(getbufferproc)wbuf_getbuffer, NULL};
static PySequenceMethods wbuf_as_sequence = {(lenfunc)wbuf_length, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                             NULL};

static PyTypeObject WBufType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracekit.ingest.wirec.Buffer",
    .tp_basicsize = sizeof(WBuf),
    .tp_dealloc = (destructor)wbuf_dealloc,
    .tp_as_sequence = &wbuf_as_sequence,
    .tp_as_buffer = &wbuf_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Writable memory holding one decoded column (view it with numpy.frombuffer).",
};

/* ==== decoder state ====================================================================================== */

typedef struct {
    size_t stat;  /* index of the stat entry */
    cptr p;       /* payload */
    size_t len;
    int kind;     /* 5 str, 6 bytes */
} StrRef;

/* One line: its framing (phase 1), its columns (phase 2), its error if any. */
typedef struct {
    cptr start, end; /* the XLine message */
    Py_ssize_t n;    /* events */
    uint64_t id, ts, dur, display_id;
    PyObject *name, *display_name;
    WBuf *mids, *offs, *durs;
    WBuf *st_ev, *st_id, *st_kind, *st_int, *st_dbl;
    size_t st_n;
    StrRef *strs;
    size_t n_strs, cap_strs;
    /* phase 2 outcome */
    int failed; /* FAIL_* */
    Py_ssize_t err_at;
    char err[160];
} Job;

enum { FAIL_NONE = 0, FAIL_CORRUPT = 1, FAIL_NOMEM = 2, FAIL_LIMIT = 3, FAIL_CHANGED = 4 };

typedef struct Pool Pool;

/* What the limits count (phase 1 in Dec, phase 2 in the Pool). Work is unsigned: no overflow to worry about
 * (a total past the budget is refused long before it could wrap). */
typedef struct {
    int64_t max_events, max_stats, budget;             /* -1: no limit */
    uint64_t w_plane, w_meta, w_line, w_event, w_stat; /* work per item */
    uint64_t work, planes, lines, events;
    const char *kind;                                  /* the limit passed: "events" or "work" */
    uint64_t count;                                    /* its count when it was passed */
} Limits;

/* Decoding context: phase 1 (one), phase 2 (one per thread). */
typedef struct {
    cptr base, hard_end; /* the input buffer */
    int failed;          /* FAIL_* */
    Py_ssize_t err_at;
    char err[160];
    Limits *lim;         /* phase 1 */
    Pool *pool;          /* phase 2: the shared stat count */
    size_t st_committed; /* phase 2: stats of the current line already added to the pool's count */
    /* the line being decoded (phase 2) and its stat columns' data */
    Job *job;
    int32_t *ev;
    int64_t *sid;
    int8_t *kind;
    int64_t *iv;
    double *dv;
    size_t st_n, st_cap;
    int skip_stats;      /* phase 2: step over events' stats (the pool's setting) */
} Dec;

/* ---- errors (no Python API: usable without the GIL) ----------------------------------------------------- */

static void
fail(Dec *d, cptr at, const char *what)
{
    if (d->failed)
        return;
    d->failed = 1;
    d->err_at = (Py_ssize_t)(at - d->base);
    snprintf(d->err, sizeof d->err, "%s", what);
}

static void
fail_field(Dec *d, cptr at, const char *msg, uint64_t field, int wt)
{
    char buf[160];
    snprintf(buf, sizeof buf, "%s field %llu with wire type %d", msg, (unsigned long long)field, wt);
    fail(d, at, buf);
}

static void
fail_varint(Dec *d, cptr p, cptr end)
{
    /* 10 bytes available and all of them continued: too long; else it runs past the end */
    if (end - p >= 10) {
        int i;
        for (i = 0; i < 10; i++)
            if (!(p[i] & 0x80))
                break;
        if (i == 10) {
            fail(d, p, "varint longer than 10 bytes");
            return;
        }
    }
    fail(d, p, "truncated varint");
}

static void
fail_nomem(Dec *d)
{
    if (!d->failed)
        d->failed = FAIL_NOMEM;
}

/* Phase 1: counts one more item of weight `w` (and `events` events); 0, or -1 with the failure recorded when a
 * limit is passed. */
static int
count_work(Dec *d, uint64_t w, uint64_t events)
{
    Limits *l = d->lim;
    l->events += events;
    if (l->max_events >= 0 && l->events > (uint64_t)l->max_events) {
        l->kind = "events";
        l->count = l->events;
        d->failed = FAIL_LIMIT;
        return -1;
    }
    l->work += w;
    if (l->budget >= 0 && l->work > (uint64_t)l->budget) {
        l->kind = "work";
        l->count = l->work;
        d->failed = FAIL_LIMIT;
        return -1;
    }
    return 0;
}

static PyObject *LimitError, *InputChanged;

/* With the GIL: turn a recorded failure into an exception. */
static void
raise_failure(int failed, Py_ssize_t at, const char *err, const Limits *l, uint64_t stats)
{
    if (failed == FAIL_NOMEM)
        PyErr_NoMemory();
    else if (failed == FAIL_CHANGED)
        PyErr_SetString(InputChanged, "the input changed while it was being read (a memory-mapped file shrank)");
    else if (failed == FAIL_LIMIT) {
        PyObject *args = Py_BuildValue("(sKLKKKK)", l->kind, (unsigned long long)l->count,
                                       (long long)(!strcmp(l->kind, "events") ? l->max_events
                                                   : !strcmp(l->kind, "stats") ? l->max_stats : l->budget),
                                       (unsigned long long)l->planes, (unsigned long long)l->lines,
                                       (unsigned long long)l->events, (unsigned long long)stats);
        if (args) {
            PyErr_SetObject(LimitError, args);
            Py_DECREF(args);
        }
    }
    else
        PyErr_Format(PyExc_ValueError, "corrupt XSpace: %s at byte %zd", err, at);
}

/* ---- primitives ----------------------------------------------------------------------------------------- */

static cptr
get_varint_slow(cptr p, cptr end, uint64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p + i >= end)
            return NULL;
        uint64_t b = p[i];
        v |= (b & 0x7f) << (7 * i);
        if (b < 0x80) {
            *out = v;
            return p + i + 1;
        }
    }
    return NULL;
}

/* NULL on a truncated or over-long varint (no error recorded: callers use fail_varint). Bits beyond 64 of a
 * 10-byte varint are dropped, as protobuf decoders do. `end` is the end of the (sub)message, `hard_end` the
 * end of the input: the fast path may look past `end` (never past `hard_end`) and then rejects a varint that
 * does not finish by `end`, so small submessages need no byte-by-byte bounds checks. */
INLINE cptr
get_varint(cptr p, cptr end, cptr hard_end, uint64_t *out)
{
    if (LIKELY(hard_end - p >= 10 && p < end)) {
        uint64_t b = p[0], v;
        cptr q;
        if (LIKELY(b < 0x80)) {
            *out = b;
            return p + 1;
        }
        v = b & 0x7f;
#define VSTEP(i)                                 \
    b = p[i];                                    \
    v |= (b & 0x7f) << (7 * (i));                \
    if (b < 0x80) {                              \
        q = p + (i) + 1;                         \
        goto done;                               \
    }
        VSTEP(1) VSTEP(2) VSTEP(3) VSTEP(4) VSTEP(5) VSTEP(6) VSTEP(7) VSTEP(8) VSTEP(9)
#undef VSTEP
        return NULL;
    done:
        if (UNLIKELY(q > end))
            return NULL;
        *out = v;
        return q;
    }
    return get_varint_slow(p, end, out);
}

/* The macros below expect a `Dec *d` and an `error:` label in scope. */

/* Reads a varint into *out or fails. */
#define VARINT(p, end, out)                                      \
    do {                                                         \
        cptr q_ = get_varint((p), (end), d->hard_end, (out));    \
        if (UNLIKELY(!q_)) {                                     \
            fail_varint(d, (p), (end));                          \
            goto error;                                          \
        }                                                        \
        (p) = q_;                                                \
    } while (0)

/* Reads a tag; checks that it takes at most 5 bytes (as upb does: a tag is a uint32), that it fits 32 bits and
 * that its field number is not 0. */
#define TAGV(p, end, out)                                        \
    do {                                                         \
        cptr t_ = (p);                                           \
        VARINT(p, end, out);                                     \
        if (UNLIKELY((p) - t_ > 5)) {                            \
            fail(d, t_, "tag longer than 5 bytes");              \
            goto error;                                          \
        }                                                        \
        if (UNLIKELY(*(out) > 0xffffffffull)) {                  \
            fail(d, t_, "tag wider than 32 bits");               \
            goto error;                                          \
        }                                                        \
        if (UNLIKELY((*(out) >> 3) == 0)) {                      \
            fail(d, t_, "field number 0");                       \
            goto error;                                          \
        }                                                        \
    } while (0)

/* Tag with a one-byte fast path (p < end is known). A one-byte tag is not checked here: the known ones are
 * matched first and anything else goes to skip_field, which rejects field number 0. */
#define FAST_TAG(p, end, out)                                    \
    do {                                                         \
        if (LIKELY(*(p) < 0x80)) {                               \
            *(out) = *(p);                                       \
            (p)++;                                               \
        }                                                        \
        else                                                     \
            TAGV(p, end, out);                                   \
    } while (0)

/* Reads a length prefix and sets sub_end; fails when the payload runs past end. */
#define LENGTH(p, end, sub_end)                                                 \
    do {                                                                        \
        cptr l_ = (p);                                                          \
        uint64_t n_;                                                            \
        VARINT(p, end, &n_);                                                    \
        if (UNLIKELY(n_ > (uint64_t)((end) - (p)))) {                           \
            fail(d, l_, "length runs past the end of the enclosing message");   \
            goto error;                                                         \
        }                                                                       \
        (sub_end) = (p) + n_;                                                   \
    } while (0)

/* Skips the payload of an unknown field (its tag, at tagpos, already read), or fails: field number 0, a
 * known field with another wire type, a group, an invalid wire type. NULL after recording a failure. */
NOINLINE cptr
skip_field(Dec *d, cptr tagpos, cptr p, cptr end, uint64_t tag, uint64_t known)
{
    uint64_t field = tag >> 3;
    int wt = (int)(tag & 7);
    if (field == 0) {
        fail(d, tagpos, "field number 0");
        return NULL;
    }
    if (field < 64 && (known & BIT(field))) {
        fail_field(d, tagpos, "unexpected wire type for", field, wt);
        return NULL;
    }
    switch (wt) {
    case WT_VARINT: {
        uint64_t v;
        cptr q = get_varint(p, end, d->hard_end, &v);
        if (!q) {
            fail_varint(d, p, end);
            return NULL;
        }
        return q;
    }
    case WT_I64:
        if (end - p < 8) {
            fail(d, p, "truncated fixed64");
            return NULL;
        }
        return p + 8;
    case WT_I32:
        if (end - p < 4) {
            fail(d, p, "truncated fixed32");
            return NULL;
        }
        return p + 4;
    case WT_LEN: {
        uint64_t n;
        cptr q = get_varint(p, end, d->hard_end, &n);
        if (!q) {
            fail_varint(d, p, end);
            return NULL;
        }
        if (n > (uint64_t)(end - q)) {
            fail(d, p, "length runs past the end of the enclosing message");
            return NULL;
        }
        return q + n;
    }
    case WT_SGROUP:
    case WT_EGROUP:
        fail_field(d, tagpos, "unsupported group:", field, wt);
        return NULL;
    default:
        fail_field(d, tagpos, "invalid wire type:", field, wt);
        return NULL;
    }
}

#define SKIP(tagpos, p, end, tag, known)                                   \
    do {                                                                   \
        cptr s_ = skip_field(d, (tagpos), (p), (end), (tag), (known));     \
        if (!s_)                                                           \
            goto error;                                                    \
        (p) = s_;                                                          \
    } while (0)

/* Strict UTF-8 (what upb and Python's decoder accept): no overlong forms, no surrogates, nothing past
 * U+10FFFF, no truncated sequences. */
static int
utf8_valid(cptr s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c < 0xC2) /* continuation byte, or overlong 2-byte lead */
            return 0;
        if (c < 0xE0) {
            if (n - i < 2 || (s[i + 1] & 0xC0) != 0x80)
                return 0;
            i += 2;
            continue;
        }
        if (c < 0xF0) {
            if (n - i < 3 || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80)
                return 0;
            if (c == 0xE0 && s[i + 1] < 0xA0) /* overlong */
                return 0;
            if (c == 0xED && s[i + 1] >= 0xA0) /* surrogate */
                return 0;
            i += 3;
            continue;
        }
        if (c < 0xF5) {
            if (n - i < 4 || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 ||
                (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && s[i + 1] < 0x90) /* overlong */
                return 0;
            if (c == 0xF4 && s[i + 1] >= 0x90) /* past U+10FFFF */
                return 0;
            i += 4;
            continue;
        }
        return 0;
    }
    return 1;
}

/* With the GIL: a new str from a proto3 string payload, or NULL (failure recorded, or exception set). */
static PyObject *
make_str(Dec *d, cptr p, cptr end)
{
    if (!utf8_valid(p, (size_t)(end - p))) {
        fail(d, p, "invalid UTF-8 in a string field");
        return NULL;
    }
    return PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)(end - p), NULL);
}

/* ==== phase 2: events and stats (no Python API) ========================================================== */

static int commit_stats(Dec *d);

/* Room for more stats: commits the stats read so far to the shared count first (the budget decides before the
 * columns grow). 0, or -1 with the failure recorded. */
static int
stats_grow(Dec *d)
{
    Job *j = d->job;
    size_t cap = d->st_cap ? d->st_cap * 2 : 1024;
    if (commit_stats(d) < 0)
        return -1;
    if (cap > ((size_t)PY_SSIZE_T_MAX / 8)) {
        fail_nomem(d);
        return -1;
    }
    if (wbuf_reserve(j->st_ev, (Py_ssize_t)(cap * sizeof(int32_t))) < 0 ||
        wbuf_reserve(j->st_id, (Py_ssize_t)(cap * sizeof(int64_t))) < 0 ||
        wbuf_reserve(j->st_kind, (Py_ssize_t)(cap * sizeof(int8_t))) < 0 ||
        wbuf_reserve(j->st_int, (Py_ssize_t)(cap * sizeof(int64_t))) < 0 ||
        wbuf_reserve(j->st_dbl, (Py_ssize_t)(cap * sizeof(double))) < 0) {
        fail_nomem(d);
        return -1;
    }
    d->st_cap = cap;
    d->ev = (int32_t *)j->st_ev->data;
    d->sid = (int64_t *)j->st_id->data;
    d->kind = (int8_t *)j->st_kind->data;
    d->iv = (int64_t *)j->st_int->data;
    d->dv = (double *)j->st_dbl->data;
    return 0;
}

static int
push_strref(Job *j, size_t stat, cptr p, size_t len, int kind)
{
    if (j->n_strs == j->cap_strs) {
        size_t cap = j->cap_strs ? j->cap_strs * 2 : 64;
        StrRef *n = (StrRef *)realloc(j->strs, cap * sizeof(StrRef));
        if (!n)
            return -1;
        j->strs = n;
        j->cap_strs = cap;
    }
    StrRef *r = &j->strs[j->n_strs++];
    r->stat = stat;
    r->p = p;
    r->len = len;
    r->kind = kind;
    return 0;
}

INLINE int
parse_stat(Dec *d, cptr p, cptr end, int32_t event_index)
{
    uint64_t mid = 0, iv = 0, tag, bits;
    double dv = NAN;
    int kind = 0;
    cptr sp = NULL, sub_end;
    size_t slen = 0;

    while (p < end) {
        cptr tp = p;
        FAST_TAG(p, end, &tag);
        if (tag == TAG(1, WT_VARINT))
            VARINT(p, end, &mid);
        else if (tag == TAG(4, WT_VARINT) || tag == TAG(3, WT_VARINT) || tag == TAG(7, WT_VARINT)) {
            VARINT(p, end, &iv);
            kind = (int)(tag >> 3);
            dv = NAN;
        }
        else if (tag == TAG(2, WT_I64)) {
            if (UNLIKELY(end - p < 8)) {
                fail(d, p, "truncated fixed64");
                goto error;
            }
            bits = 0;
            for (int i = 0; i < 8; i++) /* little-endian on the wire, whatever the host */
                bits |= (uint64_t)p[i] << (8 * i);
            memcpy(&dv, &bits, 8);
            p += 8;
            kind = 2;
            iv = 0;
        }
        else if (tag == TAG(5, WT_LEN) || tag == TAG(6, WT_LEN)) {
            LENGTH(p, end, sub_end);
            /* every str_value occurrence must be valid UTF-8, even one a later value replaces */
            if (tag == TAG(5, WT_LEN) && !utf8_valid(p, (size_t)(sub_end - p))) {
                fail(d, p, "invalid UTF-8 in a string field");
                goto error;
            }
            sp = p;
            slen = (size_t)(sub_end - p);
            p = sub_end;
            kind = (int)(tag >> 3);
            iv = 0;
            dv = NAN;
        }
        else
            SKIP(tp, p, end, tag, KNOWN_STAT);
    }

    if (UNLIKELY(d->st_n == d->st_cap) && stats_grow(d) < 0)
        goto error;
    size_t k = d->st_n++;
    if (UNLIKELY(kind == 5 || kind == 6)) {
        /* stat_int becomes the index in stat_str, filled in phase 3 */
        iv = d->job->n_strs;
        if (push_strref(d->job, k, sp, slen, kind) < 0) {
            fail_nomem(d);
            goto error;
        }
    }
    d->ev[k] = event_index;
    d->sid[k] = (int64_t)mid;
    d->kind[k] = (int8_t)kind;
    d->iv[k] = (int64_t)iv;
    d->dv[k] = dv;
    return 0;
error:
    return -1;
}

INLINE int
parse_event(Dec *d, cptr p, cptr end, int32_t idx, int64_t *mid_out, int64_t *off_out, int64_t *dur_out)
{
    uint64_t mid = 0, off = 0, dur = 0, tag, tmp;
    cptr sub_end;
    while (p < end) {
        cptr tp = p;
        FAST_TAG(p, end, &tag);
        if (tag == TAG(1, WT_VARINT))
            VARINT(p, end, &mid);
        else if (tag == TAG(2, WT_VARINT))
            VARINT(p, end, &off);
        else if (tag == TAG(3, WT_VARINT))
            VARINT(p, end, &dur);
        else if (tag == TAG(4, WT_LEN)) {
            LENGTH(p, end, sub_end);
            if (!d->skip_stats && parse_stat(d, p, sub_end, idx) < 0)
                goto error;
            p = sub_end;
        }
        else if (tag == TAG(5, WT_VARINT)) { /* num_occurrences: same oneof as offset_ps, which then reads 0 */
            VARINT(p, end, &tmp);
            off = 0;
        }
        else
            SKIP(tp, p, end, tag, KNOWN_EVENT);
    }
    *mid_out = (int64_t)mid;
    *off_out = (int64_t)off;
    *dur_out = (int64_t)dur;
    return 0;
error:
    return -1;
}

/* Decodes the events of one line into its columns; records any failure in the job. */
static void
decode_job(Dec *d, Job *j)
{
    cptr p = j->start, end = j->end, sub_end;
    uint64_t tag;
    int64_t *m = (int64_t *)j->mids->data, *o = (int64_t *)j->offs->data, *du = (int64_t *)j->durs->data;
    Py_ssize_t i = 0;

    d->failed = 0;
    d->job = j;
    d->st_n = 0;
    d->st_cap = 0;
    d->st_committed = 0;
    /* first guess: one stat per event */
    if (j->n > 0) {
        d->st_cap = (size_t)j->n / 2 + 1;
        if (stats_grow(d) < 0)
            goto error;
    }
    while (p < end) {
        cptr tp = p;
        FAST_TAG(p, end, &tag);
        if (LIKELY(tag == TAG(4, WT_LEN))) {
            LENGTH(p, end, sub_end);
            if (UNLIKELY(i >= j->n)) { /* cannot happen: phase 1 counted these same bytes */
                fail(d, tp, "internal error: event count changed");
                goto error;
            }
            if (parse_event(d, p, sub_end, (int32_t)i, m + i, o + i, du + i) < 0)
                goto error;
            i++;
            p = sub_end;
        }
        else /* line scalars were read in phase 1: step over them */
            switch (tag) {
            case TAG(1, WT_VARINT):
            case TAG(3, WT_VARINT):
            case TAG(9, WT_VARINT):
            case TAG(10, WT_VARINT):
                VARINT(p, end, &tag);
                break;
            case TAG(2, WT_LEN):
            case TAG(11, WT_LEN):
                LENGTH(p, end, sub_end);
                p = sub_end;
                break;
            default:
                SKIP(tp, p, end, tag, KNOWN_LINE);
            }
    }
    commit_stats(d);
error:
    j->st_n = d->st_n;
    j->failed = d->failed;
    if (d->failed) {
        j->err_at = d->err_at;
        memcpy(j->err, d->err, sizeof j->err);
    }
    d->job = NULL;
}

struct Pool {
    Job *jobs;
    size_t *order; /* job indices, largest first */
    size_t n_jobs;
    size_t next;   /* next position in order, shared by the workers */
    cptr base, hard_end;
#if HAVE_THREADS
    pthread_mutex_t lock;
#endif
    int threaded;
    int stop;        /* a worker failed for a reason that ends the whole decode (limit, input changed) */
    uint64_t stats;  /* stats committed by all workers */
    uint64_t stat_room; /* how many stats the budget and max_stats allow after phase 1 (UINT64_MAX: no limit) */
    int skip_stats;  /* stats=False: events' stats are stepped over (framing checked), not decoded */
};

static uint64_t
pool_add_stats(Pool *pool, uint64_t n)
{
#if defined(__GNUC__) || defined(__clang__)
    return __atomic_add_fetch(&pool->stats, n, __ATOMIC_RELAXED);
#else
    uint64_t t;
#if HAVE_THREADS
    if (pool->threaded)
        pthread_mutex_lock(&pool->lock);
#endif
    t = pool->stats += n;
#if HAVE_THREADS
    if (pool->threaded)
        pthread_mutex_unlock(&pool->lock);
#endif
    return t;
#endif
}

static void
pool_set_stop(Pool *pool)
{
#if defined(__GNUC__) || defined(__clang__)
    __atomic_store_n(&pool->stop, 1, __ATOMIC_RELAXED);
#else
    pool->stop = 1;
#endif
}

static int
pool_stopped(Pool *pool)
{
#if defined(__GNUC__) || defined(__clang__)
    return __atomic_load_n(&pool->stop, __ATOMIC_RELAXED);
#else
    return pool->stop;
#endif
}

/* Adds the current line's stats read since the last commit to the shared count; 0, or -1 (limit failure
 * recorded, the other workers told to stop) when the count passes what the budget leaves. Whether a valid
 * input passes does not depend on the threads: the final count is exact, and an early stop only happens once
 * the exact count is known to be over. */
static int
commit_stats(Dec *d)
{
    Pool *pool = d->pool;
    uint64_t n = (uint64_t)(d->st_n - d->st_committed), total;
    d->st_committed = d->st_n;
    if (!pool || !n)
        return 0;
    total = pool_add_stats(pool, n);
    if (total > pool->stat_room) {
        if (!d->failed)
            d->failed = FAIL_LIMIT;
        pool_set_stop(pool);
        return -1;
    }
    return 0;
}

static size_t
pool_take(Pool *pool)
{
    size_t k;
#if HAVE_THREADS
    if (pool->threaded) {
        pthread_mutex_lock(&pool->lock);
        k = pool->next++;
        pthread_mutex_unlock(&pool->lock);
        return k;
    }
#endif
    k = pool->next++;
    return k;
}

/* ---- SIGBUS guard ---------------------------------------------------------------------------------------
 * A file-backed memory map faults with SIGBUS on its pages past the file's end when the file shrinks while it is
 * read (a trace still being rewritten). Each thread that reads the input arms the guard with its own jump buffer
 * and the input's address range; the handler jumps back when the fault is inside that range, and otherwise puts
 * back the handler that was there before and returns, so that the fault repeats and goes where it always went. */
#if HAVE_BUS_GUARD
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__STDC_NO_THREADS__)
#define TLS _Thread_local
#else
#define TLS __thread
#endif
static TLS sigjmp_buf *bus_jmp;
static TLS cptr bus_lo, bus_hi;
static struct sigaction bus_prev;

static void
bus_handler(int sig, siginfo_t *si, void *uc)
{
    sigjmp_buf *j = bus_jmp;
    (void)sig;
    (void)uc;
    if (j && si && (cptr)si->si_addr >= bus_lo && (cptr)si->si_addr < bus_hi) {
        bus_jmp = NULL;
        siglongjmp(*j, 1);
    }
    sigaction(SIGBUS, &bus_prev, NULL);
}

/* With the GIL (so no two installs race): make sure our handler is the one in place. */
static void
bus_install(void)
{
    struct sigaction cur, ours;
    if (sigaction(SIGBUS, NULL, &cur) != 0)
        return;
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == bus_handler)
        return;
    memset(&ours, 0, sizeof ours);
    ours.sa_sigaction = bus_handler;
    ours.sa_flags = SA_SIGINFO;
    sigemptyset(&ours.sa_mask);
    if (sigaction(SIGBUS, &ours, &bus_prev) != 0)
        memset(&bus_prev, 0, sizeof bus_prev);
}

/* Arms the guard of this thread (saving what was armed before into *saved). Armed before the sigsetjmp, so that
 * nothing local changes between the sigsetjmp and a jump back:
 *     BusSaved sv; bus_arm(&jb, lo, hi, &sv); if (sigsetjmp(jb, 1)) { ...fault... } ...; bus_disarm(&sv); */
typedef struct {
    sigjmp_buf *jmp;
    cptr lo, hi;
} BusSaved;

static void
bus_arm(sigjmp_buf *jb, cptr lo, cptr hi, BusSaved *saved)
{
    saved->jmp = bus_jmp;
    saved->lo = bus_lo;
    saved->hi = bus_hi;
    bus_lo = lo;
    bus_hi = hi;
    bus_jmp = jb;
}

static void
bus_disarm(const BusSaved *saved)
{
    bus_jmp = saved->jmp;
    bus_lo = saved->lo;
    bus_hi = saved->hi;
}
#endif

static void *
pool_work(void *arg)
{
    Pool *pool = (Pool *)arg;
    Dec d;
    Job *volatile cur = NULL;
#if HAVE_BUS_GUARD
    sigjmp_buf jb;
    BusSaved sv;
#endif
    memset(&d, 0, sizeof d);
    d.base = pool->base;
    d.hard_end = pool->hard_end;
    d.pool = pool;
    d.skip_stats = pool->skip_stats;
#if HAVE_BUS_GUARD
    bus_arm(&jb, pool->base, pool->hard_end, &sv);
    if (sigsetjmp(jb, 1)) { /* the input shrank under us: this line, and the whole decode, fail */
        if (cur)
            cur->failed = FAIL_CHANGED;
        pool_set_stop(pool);
        goto out;
    }
#endif
    for (;;) {
        size_t k;
        if (pool_stopped(pool))
            break;
        k = pool_take(pool);
        if (k >= pool->n_jobs)
            break;
        cur = &pool->jobs[pool->order[k]];
        decode_job(&d, cur);
        if (cur->failed == FAIL_LIMIT)
            break;
    }
#if HAVE_BUS_GUARD
out:
    bus_disarm(&sv);
#endif
    return NULL;
}

typedef struct {
    Py_ssize_t size;
    size_t index;
} JobSize;

/* Largest first; ties in file order. */
static int
cmp_job_size(const void *a, const void *b)
{
    const JobSize *x = (const JobSize *)a, *y = (const JobSize *)b;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

/* Runs phase 2 over the pool's jobs with up to `threads` threads (this one included). Called without the GIL. */
static void
run_jobs(Pool *pool, int threads)
{
#if HAVE_THREADS
    pthread_t tids[64];
    int started = 0;
    if (threads > 64)
        threads = 64;
    if (threads > 1 && pool->n_jobs > 1) {
        if (pthread_mutex_init(&pool->lock, NULL) == 0) {
            pool->threaded = 1;
            for (int t = 1; t < threads && (size_t)t < pool->n_jobs; t++) {
                if (pthread_create(&tids[started], NULL, pool_work, pool) != 0)
                    break; /* fewer workers is fine */
                started++;
            }
        }
    }
    pool_work(pool);
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    if (pool->threaded)
        pthread_mutex_destroy(&pool->lock);
#else
    (void)threads;
    pool_work(pool);
#endif
}

/* ==== phase 1: framing (GIL held) ======================================================================== */

typedef struct {
    Job *jobs;
    size_t n_jobs, cap_jobs;
} Jobs;

static void
job_clear(Job *j)
{
    Py_CLEAR(j->name);
    Py_CLEAR(j->display_name);
    Py_CLEAR(j->mids);
    Py_CLEAR(j->offs);
    Py_CLEAR(j->durs);
    Py_CLEAR(j->st_ev);
    Py_CLEAR(j->st_id);
    Py_CLEAR(j->st_kind);
    Py_CLEAR(j->st_int);
    Py_CLEAR(j->st_dbl);
    free(j->strs);
    j->strs = NULL;
}

/* Reads one XLine's scalars, counts its events and allocates its columns. Returns the job index, or -1
 * (failure recorded in d, or exception set). */
static Py_ssize_t
frame_line(Dec *d, Jobs *js, cptr start, cptr end)
{
    cptr p = start, sub_end;
    uint64_t tag;
    Job *j;

    if (js->n_jobs == js->cap_jobs) {
        size_t cap = js->cap_jobs ? js->cap_jobs * 2 : 64;
        Job *n = (Job *)realloc(js->jobs, cap * sizeof(Job));
        if (!n) {
            PyErr_NoMemory();
            return -1;
        }
        js->jobs = n;
        js->cap_jobs = cap;
    }
    j = &js->jobs[js->n_jobs++];
    memset(j, 0, sizeof *j);
    j->start = start;
    j->end = end;

    while (p < end) {
        cptr tp = p;
        FAST_TAG(p, end, &tag);
        if (LIKELY(tag == TAG(4, WT_LEN))) {
            LENGTH(p, end, sub_end);
            p = sub_end;
            j->n++;
            continue;
        }
        switch (tag) {
        case TAG(1, WT_VARINT):
            VARINT(p, end, &j->id);
            break;
        case TAG(3, WT_VARINT):
            VARINT(p, end, &j->ts);
            break;
        case TAG(9, WT_VARINT):
            VARINT(p, end, &j->dur);
            break;
        case TAG(10, WT_VARINT):
            VARINT(p, end, &j->display_id);
            break;
        case TAG(2, WT_LEN):
        case TAG(11, WT_LEN): {
            LENGTH(p, end, sub_end);
            PyObject *s = make_str(d, p, sub_end);
            if (!s)
                goto error;
            if (tag == TAG(2, WT_LEN))
                Py_XSETREF(j->name, s);
            else
                Py_XSETREF(j->display_name, s);
            p = sub_end;
            break;
        }
        default:
            SKIP(tp, p, end, tag, KNOWN_LINE);
        }
    }
    /* event indices must fit int32, column sizes Py_ssize_t */
    if (j->n > INT32_MAX || j->n > PY_SSIZE_T_MAX / 8) {
        fail(d, start, "more than 2**31 events in one line");
        goto error;
    }
    d->lim->lines++;
    if (count_work(d, d->lim->w_line + (uint64_t)j->n * d->lim->w_event, (uint64_t)j->n) < 0)
        goto error; /* before the line's columns exist */
    if (!j->name && !(j->name = PyUnicode_FromStringAndSize("", 0)))
        goto error;
    if (!j->display_name && !(j->display_name = PyUnicode_FromStringAndSize("", 0)))
        goto error;
    if (!(j->mids = wbuf_new(j->n * 8)) || !(j->offs = wbuf_new(j->n * 8)) || !(j->durs = wbuf_new(j->n * 8)))
        goto error;
    j->mids->len = j->offs->len = j->durs->len = j->n * 8;
    if (!(j->st_ev = wbuf_new(0)) || !(j->st_id = wbuf_new(0)) || !(j->st_kind = wbuf_new(0)) ||
        !(j->st_int = wbuf_new(0)) || !(j->st_dbl = wbuf_new(0)))
        goto error;
    return (Py_ssize_t)(js->n_jobs - 1);
error:
    return -1;
}

typedef struct {
    cptr a, b;
} Seg;

/* One XPlane: (id, name, head, [job indices as ints]) with lines framed into js. NULL on failure. */
static PyObject *
frame_plane(Dec *d, Jobs *js, cptr start, cptr end)
{
    cptr p = start, sub_end, seg_start = start;
    uint64_t tag, id = 0;
    PyObject *name = NULL, *lines = NULL, *head = NULL, *obj;
    Seg *segs = NULL;
    size_t nseg = 0, capseg = 0, head_len = 0;

    d->lim->planes++;
    if (count_work(d, d->lim->w_plane, 0) < 0)
        goto error;
    if (!(name = PyUnicode_FromStringAndSize("", 0)) || !(lines = PyList_New(0)))
        goto error;

#define PUSH_SEG(A, B)                                                        \
    do {                                                                      \
        if ((A) < (B)) {                                                      \
            if (nseg == capseg) {                                             \
                size_t nc_ = capseg ? capseg * 2 : 8;                         \
                Seg *ns_ = (Seg *)realloc(segs, nc_ * sizeof(Seg));           \
                if (!ns_) {                                                   \
                    PyErr_NoMemory();                                         \
                    goto error;                                               \
                }                                                             \
                segs = ns_;                                                   \
                capseg = nc_;                                                 \
            }                                                                 \
            segs[nseg].a = (A);                                               \
            segs[nseg].b = (B);                                               \
            nseg++;                                                           \
            head_len += (size_t)((B) - (A));                                  \
        }                                                                     \
    } while (0)

    while (p < end) {
        cptr tp = p;
        FAST_TAG(p, end, &tag);
        switch (tag) {
        case TAG(3, WT_LEN): {
            LENGTH(p, end, sub_end);
            PUSH_SEG(seg_start, tp);
            Py_ssize_t k = frame_line(d, js, p, sub_end);
            if (k < 0)
                goto error;
            if (!(obj = PyLong_FromSsize_t(k)))
                goto error;
            if (PyList_Append(lines, obj) < 0) {
                Py_DECREF(obj);
                goto error;
            }
            Py_DECREF(obj);
            p = sub_end;
            seg_start = p;
            break;
        }
        case TAG(1, WT_VARINT):
            VARINT(p, end, &id);
            break;
        case TAG(2, WT_LEN):
            LENGTH(p, end, sub_end);
            if (!(obj = make_str(d, p, sub_end)))
                goto error;
            Py_SETREF(name, obj);
            p = sub_end;
            break;
        case TAG(4, WT_LEN):
        case TAG(5, WT_LEN):
        case TAG(6, WT_LEN): /* metadata maps and plane stats: left to upb, through the head; counted here */
            LENGTH(p, end, sub_end);
            if (count_work(d, d->lim->w_meta, 0) < 0)
                goto error;
            p = sub_end;
            break;
        default:
            SKIP(tp, p, end, tag, KNOWN_PLANE);
        }
    }
    PUSH_SEG(seg_start, end);
#undef PUSH_SEG

    if (!(head = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)head_len)))
        goto error;
    {
        char *w = PyBytes_AS_STRING(head);
        for (size_t k = 0; k < nseg; k++) {
            size_t len = (size_t)(segs[k].b - segs[k].a);
            memcpy(w, segs[k].a, len);
            w += len;
        }
    }
    free(segs);
    return Py_BuildValue("(LNNN)", (long long)(int64_t)id, name, head, lines);

error:
    free(segs);
    Py_XDECREF(name);
    Py_XDECREF(lines);
    Py_XDECREF(head);
    return NULL;
}

/* ==== phase 3: results (GIL held) ======================================================================== */

/* The line tuple of a decoded job; takes the job's references. NULL with an exception set. */
static PyObject *
finish_job(Job *j)
{
    PyObject *strs = PyList_New((Py_ssize_t)j->n_strs);
    if (!strs)
        return NULL;
    for (size_t k = 0; k < j->n_strs; k++) {
        StrRef *r = &j->strs[k];
        PyObject *s = r->kind == 5 ? PyUnicode_DecodeUTF8((const char *)r->p, (Py_ssize_t)r->len, NULL)
                                   : PyBytes_FromStringAndSize((const char *)r->p, (Py_ssize_t)r->len);
        if (!s) {
            Py_DECREF(strs);
            return NULL;
        }
        PyList_SET_ITEM(strs, (Py_ssize_t)k, s);
    }
    Py_ssize_t ns = (Py_ssize_t)j->st_n;
    j->st_ev->len = ns * (Py_ssize_t)sizeof(int32_t);
    j->st_id->len = ns * (Py_ssize_t)sizeof(int64_t);
    j->st_kind->len = ns * (Py_ssize_t)sizeof(int8_t);
    j->st_int->len = ns * (Py_ssize_t)sizeof(int64_t);
    j->st_dbl->len = ns * (Py_ssize_t)sizeof(double);
    wbuf_shrink(j->st_ev);
    wbuf_shrink(j->st_id);
    wbuf_shrink(j->st_kind);
    wbuf_shrink(j->st_int);
    wbuf_shrink(j->st_dbl);
    /* "O" adds references (the job still owns its own until job_clear) */
    PyObject *t = Py_BuildValue("(LOOLLLOOOOOOOON)", (long long)(int64_t)j->id, j->name, j->display_name,
                                (long long)(int64_t)j->ts, (long long)(int64_t)j->dur,
                                (long long)(int64_t)j->display_id, j->mids, j->offs, j->durs, j->st_ev,
                                j->st_id, j->st_kind, j->st_int, j->st_dbl, strs);
    return t;
}

/* ==== entry point ======================================================================================== */

/* Everything a decode holds, on the heap: after a jump back from the SIGBUS handler the cleanup reads it through
 * a pointer that did not change, so no local variable needs to survive the jump. */
typedef struct {
    Dec dec;
    Limits lim;
    Jobs js;
    Pool pool;
    size_t *order;
    PyObject *raw_planes, *hostnames, *planes, *lines_out, *result;
} Ctx;

/* Phases 1-3 over [p, end); c->result set on success, else a failure recorded in c->dec or an exception set. */
static void
decode_all(Ctx *c, cptr p, cptr end, int threads)
{
    Dec *d = &c->dec;
    Jobs *js = &c->js;
    PyObject *obj;
    uint64_t tag;
    cptr sub_end;

    if (!(c->raw_planes = PyList_New(0)) || !(c->hostnames = PyList_New(0)))
        goto error;

    /* phase 1 */
    while (p < end) {
        cptr tp = p;
        FAST_TAG(p, end, &tag);
        switch (tag) {
        case TAG(1, WT_LEN):
            LENGTH(p, end, sub_end);
            if (!(obj = frame_plane(d, js, p, sub_end)))
                goto error;
            if (PyList_Append(c->raw_planes, obj) < 0) {
                Py_DECREF(obj);
                goto error;
            }
            Py_DECREF(obj);
            p = sub_end;
            break;
        case TAG(2, WT_LEN): /* errors, warnings: validated (as upb does), not returned */
        case TAG(3, WT_LEN):
        case TAG(4, WT_LEN):
            LENGTH(p, end, sub_end);
            if (!(obj = make_str(d, p, sub_end)))
                goto error;
            if (tag == TAG(4, WT_LEN) && PyList_Append(c->hostnames, obj) < 0) {
                Py_DECREF(obj);
                goto error;
            }
            Py_DECREF(obj);
            p = sub_end;
            break;
        default:
            SKIP(tp, p, end, tag, KNOWN_SPACE);
        }
    }

    /* phase 2 */
    c->pool.stat_room = UINT64_MAX;
    if (c->lim.budget >= 0 && c->lim.w_stat)
        c->pool.stat_room = ((uint64_t)c->lim.budget - c->lim.work) / c->lim.w_stat;
    if (c->lim.max_stats >= 0 && (uint64_t)c->lim.max_stats < c->pool.stat_room)
        c->pool.stat_room = (uint64_t)c->lim.max_stats;
    if (js->n_jobs) {
        if (!(c->order = (size_t *)malloc(js->n_jobs * sizeof(size_t)))) {
            PyErr_NoMemory();
            goto error;
        }
        for (size_t k = 0; k < js->n_jobs; k++)
            c->order[k] = k;
        if (threads > 1 && js->n_jobs > 1) {
            JobSize *sizes = (JobSize *)malloc(js->n_jobs * sizeof(JobSize));
            if (!sizes) {
                PyErr_NoMemory();
                goto error;
            }
            for (size_t k = 0; k < js->n_jobs; k++) {
                sizes[k].size = js->jobs[k].end - js->jobs[k].start;
                sizes[k].index = k;
            }
            qsort(sizes, js->n_jobs, sizeof(JobSize), cmp_job_size);
            for (size_t k = 0; k < js->n_jobs; k++)
                c->order[k] = sizes[k].index;
            free(sizes);
        }
        c->pool.jobs = js->jobs;
        c->pool.order = c->order;
        c->pool.n_jobs = js->n_jobs;
        c->pool.base = d->base;
        c->pool.hard_end = d->hard_end;
        Py_BEGIN_ALLOW_THREADS
        run_jobs(&c->pool, threads);
        Py_END_ALLOW_THREADS
    }

    /* phase 3: out of memory, then a changed input, then a limit, then the corruption earliest in the input
     * (whatever thread saw it) */
    {
        Job *bad = NULL;
        int worst = FAIL_NONE;
        for (size_t k = 0; k < js->n_jobs; k++) {
            Job *j = &js->jobs[k];
            if (j->failed == FAIL_NOMEM || j->failed == FAIL_CHANGED || j->failed == FAIL_LIMIT) {
                if (worst == FAIL_NONE || j->failed == FAIL_NOMEM || (j->failed == FAIL_CHANGED && worst == FAIL_LIMIT))
                    worst = j->failed;
            }
            else if (j->failed && (!bad || j->err_at < bad->err_at))
                bad = j;
        }
        if (worst == FAIL_LIMIT) {
            if (c->lim.max_stats >= 0 && c->pool.stats > (uint64_t)c->lim.max_stats) {
                c->lim.kind = "stats";
                c->lim.count = c->pool.stats;
            }
            else {
                c->lim.kind = "work";
                c->lim.count = c->lim.work + c->pool.stats * c->lim.w_stat;
            }
        }
        if (worst) {
            raise_failure(worst, 0, "", &c->lim, c->pool.stats);
            return;
        }
        if (bad) {
            raise_failure(bad->failed, bad->err_at, bad->err, &c->lim, c->pool.stats);
            return;
        }
    }
    if (!(c->planes = PyList_New(PyList_GET_SIZE(c->raw_planes))))
        goto error;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(c->raw_planes); i++) {
        PyObject *rp = PyList_GET_ITEM(c->raw_planes, i); /* (id, name, head, [job index]) */
        PyObject *idx = PyTuple_GET_ITEM(rp, 3);
        Py_ssize_t nl = PyList_GET_SIZE(idx);
        if (!(c->lines_out = PyList_New(nl)))
            goto error;
        for (Py_ssize_t k = 0; k < nl; k++) {
            Py_ssize_t jk = PyLong_AsSsize_t(PyList_GET_ITEM(idx, k));
            PyObject *t = finish_job(&js->jobs[jk]);
            if (!t)
                goto error;
            PyList_SET_ITEM(c->lines_out, k, t);
        }
        obj = Py_BuildValue("(OOON)", PyTuple_GET_ITEM(rp, 0), PyTuple_GET_ITEM(rp, 1), PyTuple_GET_ITEM(rp, 2),
                            c->lines_out);
        c->lines_out = NULL;
        if (!obj)
            goto error;
        PyList_SET_ITEM(c->planes, i, obj);
    }
    c->result = Py_BuildValue("(OO)", c->planes, c->hostnames);
    return;

error:
    if (!PyErr_Occurred())
        raise_failure(d->failed ? d->failed : FAIL_CORRUPT, d->err_at, d->failed ? d->err : "decoding failed",
                      &c->lim, c->pool.stats);
}

static void
ctx_free(Ctx *c)
{
    for (size_t k = 0; k < c->js.n_jobs; k++)
        job_clear(&c->js.jobs[k]);
    free(c->js.jobs);
    free(c->order);
    Py_XDECREF(c->lines_out);
    Py_XDECREF(c->planes);
    Py_XDECREF(c->raw_planes);
    Py_XDECREF(c->hostnames);
    free(c);
}

static PyObject *
read_space(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"data", "threads", "max_events", "budget", "weights", "max_stats", "stats", NULL};
    PyObject *data, *result;
    int threads = 1, stats = 1;
    long long max_events = -1, budget = -1, max_stats = -1;
    unsigned long long w[5] = {0, 0, 0, 0, 0};
    Py_buffer view;
    Ctx *c;
#if HAVE_BUS_GUARD
    sigjmp_buf jb;
    BusSaved sv;
#endif

    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|iLL(KKKKK)Lp:read_space", kwlist, &data, &threads, &max_events,
                                     &budget, &w[0], &w[1], &w[2], &w[3], &w[4], &max_stats, &stats))
        return NULL;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (!(c = (Ctx *)calloc(1, sizeof *c))) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    c->dec.base = (cptr)view.buf;
    c->dec.hard_end = c->dec.base + view.len;
    c->dec.lim = &c->lim;
    c->lim.max_events = max_events < 0 ? -1 : max_events;
    c->lim.max_stats = max_stats < 0 ? -1 : max_stats;
    c->lim.budget = budget < 0 ? -1 : budget;
    c->lim.w_plane = w[0];
    c->lim.w_meta = w[1];
    c->lim.w_line = w[2];
    c->lim.w_event = w[3];
    c->lim.w_stat = w[4];
    c->pool.skip_stats = !stats;
#if HAVE_BUS_GUARD
    bus_install();
    bus_arm(&jb, c->dec.base, c->dec.hard_end, &sv);
    if (sigsetjmp(jb, 1)) { /* phase 1 or 3 faulted on the input: drop what was built (a leak of what was half built) */
        Py_CLEAR(c->result);
        PyErr_Clear();
        raise_failure(FAIL_CHANGED, 0, "", &c->lim, 0);
    }
    else
#endif
        decode_all(c, c->dec.base, c->dec.hard_end, threads);
#if HAVE_BUS_GUARD
    bus_disarm(&sv);
#endif
    result = c->result;
    ctx_free(c);
    PyBuffer_Release(&view);
    return result;
}

/* nest(rows, start, end, duration, self_ps, parent) -> None
 *
 * The walk of tracekit.ingest.nesting over the events of one trace line: ``rows`` are their positions in the line's
 * order (by start, the longer of two equal starts first); an event is a child of the innermost event still open
 * (ending after it starts) whose window also holds its end, and takes its duration off that parent's self time.
 * Every event is pushed on the open-event stack, nested or not. Writes ``parent`` and ``self_ps`` at the rows'
 * positions (the caller clamps self times at 0 afterwards). Every array is C-contiguous int64; start, end,
 * duration, self_ps and parent have one entry per event (the caller makes them so); a row out of range is refused. */
static int
nest_buf(PyObject *o, Py_buffer *v, int writable, Py_ssize_t n, const char *name)
{
    if (PyObject_GetBuffer(o, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (v->itemsize != 8 || !v->format || (strcmp(v->format, "l") != 0 && strcmp(v->format, "q") != 0) ||
        (n >= 0 && v->len != n * 8)) {
        PyErr_Format(PyExc_ValueError, "wirec.nest: %s must be int64 with %zd items", name, n);
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

static PyObject *
nest(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[6];
    static const char *names[6] = {"rows", "start", "end", "duration", "self_ps", "parent"};
    if (!PyArg_ParseTuple(args, "OOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5]))
        return NULL;
    Py_buffer v[6];
    int held = 0;
    Py_ssize_t n = -1;
    for (; held < 6; held++) {
        if (nest_buf(o[held], &v[held], held >= 4, held == 0 ? -1 : n, names[held]) < 0)
            goto fail;
        if (held == 1)
            n = v[1].len / 8;
    }
    const int64_t *rows = (const int64_t *)v[0].buf, *start = (const int64_t *)v[1].buf,
                  *end = (const int64_t *)v[2].buf, *dur = (const int64_t *)v[3].buf;
    int64_t *self_ps = (int64_t *)v[4].buf, *parent = (int64_t *)v[5].buf;
    Py_ssize_t m = v[0].len / 8;
    for (Py_ssize_t k = 0; k < m; k++)
        if (rows[k] < 0 || rows[k] >= n) {
            PyErr_SetString(PyExc_ValueError, "wirec.nest: a row out of range");
            goto fail;
        }
    int64_t *stack = (int64_t *)malloc((m ? (size_t)m : 1) * sizeof(int64_t));
    if (!stack) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t top = 0; /* entries on the stack */
    for (Py_ssize_t k = 0; k < m; k++) {
        int64_t i = rows[k], s = start[i], e = end[i];
        while (top && end[stack[top - 1]] <= s)
            top--;
        if (top && e <= end[stack[top - 1]]) {
            int64_t p = stack[top - 1];
            parent[i] = p;
            self_ps[p] -= dur[i];
        }
        stack[top++] = i;
    }
    Py_END_ALLOW_THREADS
    free(stack);
    for (int i = 0; i < 6; i++)
        PyBuffer_Release(&v[i]);
    Py_RETURN_NONE;
fail:
    for (int i = 0; i < held; i++)
        PyBuffer_Release(&v[i]);
    return NULL;
}

static PyMethodDef methods[] = {
    {"read_space", (PyCFunction)(void (*)(void))read_space, METH_VARARGS | METH_KEYWORDS,
     "read_space(data, threads=1, max_events=-1, budget=-1, weights=(0, 0, 0, 0, 0), max_stats=-1, stats=True) -> "
     "(planes, hostnames); "
     "see tracekit/ingest/wire.py."},
    {"nest", nest, METH_VARARGS,
     "nest(rows, start, end, duration, self_ps, parent): the nesting walk of one line (see the source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "tracekit.ingest.wirec", "Bounds-checked XSpace wire decoder (see tracekit/ingest/wire.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit_wirec(void)
{
    if (PyType_Ready(&WBufType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    Py_INCREF(&WBufType);
    if (PyModule_AddObject(m, "Buffer", (PyObject *)&WBufType) < 0) {
        Py_DECREF(&WBufType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "HAVE_THREADS", HAVE_THREADS) < 0 ||
        PyModule_AddIntConstant(m, "HAVE_BUS_GUARD", HAVE_BUS_GUARD) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    { /* the exception classes are the pure-Python decoder's: one class each, whichever decoder raised it */
        PyObject *py = PyImport_ImportModule("tracekit.ingest.pywire");
        if (py) {
            LimitError = PyObject_GetAttrString(py, "LimitError");
            InputChanged = PyObject_GetAttrString(py, "InputChanged");
            Py_DECREF(py);
        }
    }
    if (!LimitError || !InputChanged || PyModule_AddObjectRef(m, "LimitError", LimitError) < 0 ||
        PyModule_AddObjectRef(m, "InputChanged", InputChanged) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
