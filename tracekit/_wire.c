/* tracekit._wire: a bounds-checked decoder for the XSpace wire format (tracekit/proto/xplane.proto).
 *
 * read_space(buffer) -> (planes, hostnames)
 *   planes:    list of (id, name, head, lines)
 *     head:    bytes, the plane's own fields minus every `lines` (field 3) entry, in their original order,
 *              ready for XPlane.FromString (so metadata and plane stats stay upb's business)
 *     lines:   list of (id, name, display_name, timestamp_ns, duration_ps, display_id,
 *                       metadata_id, offset_ps, event_duration_ps,              -- bytearray, int64 x n_events
 *                       stat_event, stat_id, stat_kind, stat_int, stat_double,  -- bytearray: int32, int64,
 *                       stat_str)                                                   int8, int64, float64
 *   hostnames: list of str
 *
 * Decoding follows protobuf semantics for the fields we read: the last occurrence of a scalar wins, the last
 * member set wins inside a oneof, unknown fields (wire types 0, 1, 2, 5) are skipped. It is stricter than a
 * general decoder on input no writer produces: a known field with an unexpected wire type, group wire types
 * (3, 4), wire types 6/7, field number 0, tags over 32 bits, varints over 10 bytes, lengths past the end of
 * the enclosing message and invalid UTF-8 in string fields all raise ValueError("... at byte N"), N being the
 * offset in the input buffer. No read ever goes past the end of the (sub)message being decoded.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#if defined(__linux__)
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mremap */
#endif
#include <sys/mman.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define INLINE static inline __attribute__((always_inline))
#else
#define LIKELY(x) (x)
#define UNLIKELY(x) (x)
#define INLINE static inline
#endif

typedef const uint8_t *cptr;

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_I32 = 5 };

#define TAG(f, wt) (((uint64_t)(f) << 3) | (uint64_t)(wt))

/* Known field numbers of each message (bit f set = field f is declared); a known field met with another
 * wire type than the declared one is an error, anything else unknown is skipped. */
#define BIT(f) (1ull << (f))
static const uint64_t KNOWN_SPACE = BIT(1) | BIT(2) | BIT(3) | BIT(4);
static const uint64_t KNOWN_PLANE = BIT(1) | BIT(2) | BIT(3) | BIT(4) | BIT(5) | BIT(6);
static const uint64_t KNOWN_LINE = BIT(1) | BIT(2) | BIT(3) | BIT(4) | BIT(9) | BIT(10) | BIT(11);
static const uint64_t KNOWN_EVENT = BIT(1) | BIT(2) | BIT(3) | BIT(4) | BIT(5);
static const uint64_t KNOWN_STAT = BIT(1) | BIT(2) | BIT(3) | BIT(4) | BIT(5) | BIT(6) | BIT(7);

/* ---- output buffers ------------------------------------------------------------------------------- */

/* A growable, writable block of memory exposed through the buffer protocol (np.frombuffer views it without
 * a copy). Only grown while decoding, before anyone can see it.
 *
 * On Linux, blocks past MAP_MIN bytes live in their own anonymous mapping and grow or shrink with mremap,
 * which moves page tables instead of copying: the stat columns, whose final size is unknown until the end of
 * a line, then cost no copy and no page faults beyond the pages actually written. Elsewhere, realloc. */
typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len; /* bytes exposed */
    Py_ssize_t cap; /* bytes allocated */
    int mapped;     /* data is an mmap of cap bytes (cap a multiple of the page size) */
} WBuf;

static PyTypeObject WBufType;

#if defined(__linux__) && defined(MREMAP_MAYMOVE)
#define USE_MREMAP 1
#define MAP_MIN ((Py_ssize_t)256 << 10)
#define PAGE_ROUND(n) (((n) + 4095) & ~(Py_ssize_t)4095)
#else
#define USE_MREMAP 0
#endif

/* Grow to at least `need` bytes (amortized doubling). 0, or -1 with MemoryError. */
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
        cap = PAGE_ROUND(cap);
        void *d;
        if (b->mapped)
            d = mremap(b->data, (size_t)b->cap, (size_t)cap, MREMAP_MAYMOVE);
        else {
            d = mmap(NULL, (size_t)cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (d != MAP_FAILED && b->data) {
                memcpy(d, b->data, (size_t)b->cap);
                free(b->data);
            }
        }
        if (d == MAP_FAILED) {
            PyErr_NoMemory();
            return -1;
        }
        b->data = (char *)d;
        b->cap = cap;
        b->mapped = 1;
        return 0;
    }
#endif
    char *d = (char *)realloc(b->data, (size_t)cap);
    if (!d) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = d;
    b->cap = cap;
    return 0;
}

/* New buffer with room for `cap` bytes and len 0. */
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
static PySequenceMethods wbuf_as_sequence = {(lenfunc)wbuf_length};

static PyTypeObject WBufType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracekit._wire.Buffer",
    .tp_basicsize = sizeof(WBuf),
    .tp_dealloc = (destructor)wbuf_dealloc,
    .tp_as_sequence = &wbuf_as_sequence,
    .tp_as_buffer = &wbuf_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Writable memory holding one decoded array (view it with numpy.frombuffer).",
};

typedef struct {
    cptr base;     /* start of the input, for error offsets */
    cptr hard_end; /* end of the input */
    /* the current line's stat columns */
    WBuf *st_ev, *st_id, *st_kind, *st_int, *st_dbl;
    int32_t *ev; /* their data */
    int64_t *sid;
    int8_t *kind;
    int64_t *iv;
    double *dv;
    size_t st_n, st_cap; /* entries */
    PyObject *st_str;    /* list for the current line */
} Ctx;

/* ---- errors ---------------------------------------------------------------------------------------- */

static void
fail(const Ctx *c, cptr at, const char *what)
{
    PyErr_Format(PyExc_ValueError, "corrupt XSpace: %s at byte %zd", what, (Py_ssize_t)(at - c->base));
}

static void
fail_field(const Ctx *c, cptr at, const char *msg, uint64_t field, int wt)
{
    char buf[160];
    PyOS_snprintf(buf, sizeof buf, "%s field %llu has wire type %d", msg, (unsigned long long)field, wt);
    fail(c, at, buf);
}

static void
fail_varint(const Ctx *c, cptr p, cptr end)
{
    /* 10 bytes available and all of them continued -> too long, else truncated */
    if (end - p >= 10) {
        int i;
        for (i = 0; i < 10; i++)
            if (!(p[i] & 0x80))
                break;
        if (i == 10) {
            fail(c, p, "varint longer than 10 bytes");
            return;
        }
    }
    fail(c, p, "truncated varint");
}

/* ---- primitives -------------------------------------------------------------------------------------- */

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

#define VSTEP(i)                            \
    b = p[i];                               \
    v |= (b & 0x7f) << (7 * (i));           \
    if (b < 0x80) {                         \
        *out = v;                           \
        return p + (i) + 1;                 \
    }

/* Bytes 4..10 of a varint known to have 10 readable bytes. */
INLINE cptr
get_varint_tail(cptr p, uint64_t v, uint64_t *out)
{
    uint64_t b;
    VSTEP(3) VSTEP(4) VSTEP(5) VSTEP(6) VSTEP(7) VSTEP(8) VSTEP(9)
    return NULL;
}

/* NULL on a truncated or over-long varint (no exception set: callers use fail_varint). Bits beyond 64 of a
 * 10-byte varint are dropped, as protobuf decoders do. `end` is the end of the (sub)message, `hard_end` the
 * end of the whole input: the fast path may look past `end` (never past `hard_end`) and then rejects a
 * varint that does not finish before `end`, so small submessages need no byte-by-byte bounds checks. */
INLINE cptr
get_varint(cptr p, cptr end, cptr hard_end, uint64_t *out)
{
    if (LIKELY(hard_end - p >= 10 && p < end)) {
        uint64_t b = p[0], v;
        cptr q;
        if (LIKELY(b < 0x80)) {
            *out = b;
            return p + 1; /* p < end, so p + 1 <= end */
        }
        v = b & 0x7f;
        b = p[1];
        v |= (b & 0x7f) << 7;
        if (b < 0x80)
            q = p + 2;
        else {
            b = p[2];
            v |= (b & 0x7f) << 14;
            if (b < 0x80)
                q = p + 3;
            else
                q = get_varint_tail(p, v, &v);
        }
        if (UNLIKELY(q == NULL || q > end))
            return NULL;
        *out = v;
        return q;
    }
    return get_varint_slow(p, end, out);
}
#undef VSTEP

/* Reads a varint into *out or fails (returns NULL with ValueError set). */
#define VARINT(p, end, out)                   \
    do {                                      \
        cptr q_ = get_varint((p), (end), c->hard_end, (out)); \
        if (UNLIKELY(!q_)) {                  \
            fail_varint(c, (p), (end));       \
            goto error;                       \
        }                                     \
        (p) = q_;                             \
    } while (0)

/* Reads a tag; validates it (fits 32 bits, field number > 0). */
#define TAGV(p, end, out)                                  \
    do {                                                   \
        cptr t_ = (p);                                     \
        VARINT(p, end, out);                               \
        if (UNLIKELY(*(out) > 0xffffffffull)) {            \
            fail(c, t_, "tag wider than 32 bits");         \
            goto error;                                    \
        }                                                  \
        if (UNLIKELY((*(out) >> 3) == 0)) {                \
            fail(c, t_, "field number 0");                 \
            goto error;                                    \
        }                                                  \
    } while (0)

/* Tag with a one-byte fast path (p < end is known). A one-byte tag is not checked here: the known ones are
 * matched first and anything else reaches skip_field, which rejects field number 0. */
#define FAST_TAG(p, end, out)          \
    do {                               \
        if (LIKELY(*(p) < 0x80)) {     \
            *(out) = *(p);             \
            (p)++;                     \
        }                              \
        else                           \
            TAGV(p, end, out);         \
    } while (0)

/* Reads a length prefix; sets sub_end; fails when the payload runs past end. */
#define LENGTH(p, end, sub_end)                                            \
    do {                                                                   \
        cptr l_ = (p);                                                     \
        uint64_t n_;                                                       \
        VARINT(p, end, &n_);                                               \
        if (UNLIKELY(n_ > (uint64_t)((end) - (p)))) {                      \
            fail(c, l_, "length runs past the end of the enclosing message"); \
            goto error;                                                    \
        }                                                                  \
        (sub_end) = (p) + n_;                                              \
    } while (0)

/* Skip the payload of an unknown field (tag already read at tagpos), or fail for a known field with the
 * wrong wire type, a group, or an invalid wire type. Returns NULL with ValueError set on failure. */
static cptr
skip_field(Ctx *c, cptr tagpos, cptr p, cptr end, uint64_t tag, uint64_t known)
{
    uint64_t field = tag >> 3;
    int wt = (int)(tag & 7);
    if (field == 0) {
        fail(c, tagpos, "field number 0");
        return NULL;
    }
    if (field < 64 && (known & BIT(field))) {
        fail_field(c, tagpos, "unexpected wire type:", field, wt);
        return NULL;
    }
    switch (wt) {
    case WT_VARINT: {
        uint64_t v;
        cptr q = get_varint(p, end, c->hard_end, &v);
        if (!q) {
            fail_varint(c, p, end);
            return NULL;
        }
        return q;
    }
    case WT_I64:
        if (end - p < 8) {
            fail(c, p, "truncated fixed64");
            return NULL;
        }
        return p + 8;
    case WT_I32:
        if (end - p < 4) {
            fail(c, p, "truncated fixed32");
            return NULL;
        }
        return p + 4;
    case WT_LEN: {
        uint64_t n;
        cptr q = get_varint(p, end, c->hard_end, &n);
        if (!q) {
            fail_varint(c, p, end);
            return NULL;
        }
        if (n > (uint64_t)(end - q)) {
            fail(c, p, "length runs past the end of the enclosing message");
            return NULL;
        }
        return q + n;
    }
    case WT_SGROUP:
    case WT_EGROUP:
        fail_field(c, tagpos, "unsupported group:", field, wt);
        return NULL;
    default:
        fail_field(c, tagpos, "invalid wire type:", field, wt);
        return NULL;
    }
}

#define SKIP(tagpos, p, end, tag, known)                          \
    do {                                                          \
        cptr s_ = skip_field(c, (tagpos), (p), (end), (tag), (known)); \
        if (!s_)                                                  \
            goto error;                                           \
        (p) = s_;                                                 \
    } while (0)

/* New str from a proto3 string payload, or NULL with ValueError set (invalid UTF-8). */
static PyObject *
make_str(Ctx *c, cptr p, cptr end)
{
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)(end - p), NULL);
    if (!s) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            fail(c, p, "invalid UTF-8 in a string field");
        }
        return NULL;
    }
    return s;
}

/* Replace *slot with a new str from [p, end). */
static int
set_str(Ctx *c, PyObject **slot, cptr p, cptr end)
{
    PyObject *s = make_str(c, p, end);
    if (!s)
        return -1;
    Py_XSETREF(*slot, s);
    return 0;
}

/* ---- stats scratch ----------------------------------------------------------------------------------- */

static int
stats_grow(Ctx *c)
{
    size_t cap = c->st_cap ? c->st_cap * 2 : 1024;
    if (cap > ((size_t)PY_SSIZE_T_MAX / 8)) {
        PyErr_NoMemory();
        return -1;
    }
    if (wbuf_reserve(c->st_ev, (Py_ssize_t)(cap * sizeof(int32_t))) < 0 ||
        wbuf_reserve(c->st_id, (Py_ssize_t)(cap * sizeof(int64_t))) < 0 ||
        wbuf_reserve(c->st_kind, (Py_ssize_t)(cap * sizeof(int8_t))) < 0 ||
        wbuf_reserve(c->st_int, (Py_ssize_t)(cap * sizeof(int64_t))) < 0 ||
        wbuf_reserve(c->st_dbl, (Py_ssize_t)(cap * sizeof(double))) < 0)
        return -1;
    c->st_cap = cap;
    c->ev = (int32_t *)c->st_ev->data;
    c->sid = (int64_t *)c->st_id->data;
    c->kind = (int8_t *)c->st_kind->data;
    c->iv = (int64_t *)c->st_int->data;
    c->dv = (double *)c->st_dbl->data;
    return 0;
}

/* Start the stat columns of a new line. */
static int
stats_begin(Ctx *c, size_t cap)
{
    c->st_n = 0;
    c->st_cap = 0;
    c->st_ev = wbuf_new(0);
    c->st_id = wbuf_new(0);
    c->st_kind = wbuf_new(0);
    c->st_int = wbuf_new(0);
    c->st_dbl = wbuf_new(0);
    c->st_str = PyList_New(0);
    if (!c->st_ev || !c->st_id || !c->st_kind || !c->st_int || !c->st_dbl || !c->st_str)
        return -1;
    if (cap) {
        c->st_cap = cap / 2; /* stats_grow doubles */
        return stats_grow(c);
    }
    return 0;
}

static void
stats_clear(Ctx *c)
{
    Py_CLEAR(c->st_ev);
    Py_CLEAR(c->st_id);
    Py_CLEAR(c->st_kind);
    Py_CLEAR(c->st_int);
    Py_CLEAR(c->st_dbl);
    Py_CLEAR(c->st_str);
    c->st_n = c->st_cap = 0;
}

/* ---- XStat ----------------------------------------------------------------------------------------- */

/* str_value / bytes_value payload: a new object in *slot (str validated as UTF-8). Kept out of line. */
static int
stat_string(Ctx *c, PyObject **slot, cptr p, cptr end, int is_str)
{
    if (is_str)
        return set_str(c, slot, p, end);
    PyObject *b = PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)(end - p));
    if (!b)
        return -1;
    Py_XSETREF(*slot, b);
    return 0;
}

/* Appends a str/bytes stat value to the line's list; its index goes to stat_int. */
static int
stat_push_string(Ctx *c, PyObject *sobj, uint64_t *iv)
{
    *iv = (uint64_t)PyList_GET_SIZE(c->st_str);
    return PyList_Append(c->st_str, sobj);
}

INLINE int
parse_stat(Ctx *c, cptr p, cptr end, int32_t event_index)
{
    uint64_t mid = 0, iv = 0, tag, bits;
    double dv = NAN;
    int kind = 0;
    PyObject *sobj = NULL;
    cptr sub_end;

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
                fail(c, p, "truncated fixed64");
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
            if (stat_string(c, &sobj, p, sub_end, tag == TAG(5, WT_LEN)) < 0)
                goto error;
            p = sub_end;
            kind = (int)(tag >> 3);
            dv = NAN;
        }
        else
            SKIP(tp, p, end, tag, KNOWN_STAT);
    }

    if (UNLIKELY(c->st_n == c->st_cap) && stats_grow(c) < 0)
        goto error;
    if (UNLIKELY(sobj != NULL)) {
        if ((kind == 5 || kind == 6) && stat_push_string(c, sobj, &iv) < 0)
            goto error;
        Py_DECREF(sobj);
    }
    size_t k = c->st_n++;
    c->ev[k] = event_index;
    c->sid[k] = (int64_t)mid;
    c->kind[k] = (int8_t)kind;
    c->iv[k] = (int64_t)iv;
    c->dv[k] = dv;
    return 0;
error:
    Py_XDECREF(sobj);
    return -1;
}

/* ---- XEvent ---------------------------------------------------------------------------------------- */

INLINE int
parse_event(Ctx *c, cptr p, cptr end, int32_t idx, int64_t *mid_out, int64_t *off_out, int64_t *dur_out)
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
            if (parse_stat(c, p, sub_end, idx) < 0)
                return -1;
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

/* ---- XLine ----------------------------------------------------------------------------------------- */

static PyObject *
parse_line(Ctx *c, cptr start, cptr end)
{
    cptr p = start, sub_end;
    uint64_t tag, v;
    uint64_t id = 0, ts = 0, dur = 0, display_id = 0;
    PyObject *name = NULL, *display_name = NULL, *result;
    WBuf *mids = NULL, *offs = NULL, *durs = NULL;

    /* pass 1: count events (and check the line's own framing) */
    Py_ssize_t n = 0;
    while (p < end) {
        cptr tp = p;
        FAST_TAG(p, end, &tag);
        if (LIKELY(tag == TAG(4, WT_LEN))) {
            LENGTH(p, end, sub_end);
            p = sub_end;
            n++;
        }
        else {
            switch (tag) {
            case TAG(1, WT_VARINT):
            case TAG(3, WT_VARINT):
            case TAG(9, WT_VARINT):
            case TAG(10, WT_VARINT):
                VARINT(p, end, &v);
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
    }
    /* n <= (end - start) / 2, so n * 8 cannot overflow; event indices must fit int32 */
    if (n > INT32_MAX) {
        fail(c, start, "more than 2**31 events in one line");
        goto error;
    }
    mids = wbuf_new(n * 8);
    offs = wbuf_new(n * 8);
    durs = wbuf_new(n * 8);
    name = PyUnicode_FromStringAndSize("", 0);
    display_name = PyUnicode_FromStringAndSize("", 0);
    if (!mids || !offs || !durs || !name || !display_name)
        goto error;
    mids->len = offs->len = durs->len = n * 8;
    /* first guess for the stats: one per event */
    if (stats_begin(c, (size_t)n) < 0)
        goto error;
    int64_t *m = (int64_t *)mids->data;
    int64_t *o = (int64_t *)offs->data;
    int64_t *d = (int64_t *)durs->data;

    /* pass 2: decode */
    Py_ssize_t i = 0;
    p = start;
    while (p < end) {
        cptr tp = p;
        FAST_TAG(p, end, &tag);
        if (LIKELY(tag == TAG(4, WT_LEN))) {
            LENGTH(p, end, sub_end);
            if (parse_event(c, p, sub_end, (int32_t)i, m + i, o + i, d + i) < 0)
                goto error;
            i++;
            p = sub_end;
            continue;
        }
        switch (tag) {
        case TAG(1, WT_VARINT):
            VARINT(p, end, &id);
            break;
        case TAG(3, WT_VARINT):
            VARINT(p, end, &ts);
            break;
        case TAG(9, WT_VARINT):
            VARINT(p, end, &dur);
            break;
        case TAG(10, WT_VARINT):
            VARINT(p, end, &display_id);
            break;
        case TAG(2, WT_LEN):
            LENGTH(p, end, sub_end);
            if (set_str(c, &name, p, sub_end) < 0)
                goto error;
            p = sub_end;
            break;
        case TAG(11, WT_LEN):
            LENGTH(p, end, sub_end);
            if (set_str(c, &display_name, p, sub_end) < 0)
                goto error;
            p = sub_end;
            break;
        default:
            SKIP(tp, p, end, tag, KNOWN_LINE);
        }
    }

    {
        Py_ssize_t ns = (Py_ssize_t)c->st_n;
        c->st_ev->len = ns * (Py_ssize_t)sizeof(int32_t);
        c->st_id->len = ns * (Py_ssize_t)sizeof(int64_t);
        c->st_kind->len = ns * (Py_ssize_t)sizeof(int8_t);
        c->st_int->len = ns * (Py_ssize_t)sizeof(int64_t);
        c->st_dbl->len = ns * (Py_ssize_t)sizeof(double);
        wbuf_shrink(c->st_ev);
        wbuf_shrink(c->st_id);
        wbuf_shrink(c->st_kind);
        wbuf_shrink(c->st_int);
        wbuf_shrink(c->st_dbl);
    }
    /* "N" steals the references, even when Py_BuildValue fails */
    result = Py_BuildValue("(LNNLLLNNNNNNNNN)", (long long)(int64_t)id, name, display_name,
                           (long long)(int64_t)ts, (long long)(int64_t)dur, (long long)(int64_t)display_id,
                           mids, offs, durs, c->st_ev, c->st_id, c->st_kind, c->st_int, c->st_dbl, c->st_str);
    c->st_ev = c->st_id = c->st_kind = c->st_int = c->st_dbl = NULL;
    c->st_str = NULL;
    c->st_n = c->st_cap = 0;
    return result;

error:
    Py_XDECREF(name);
    Py_XDECREF(display_name);
    Py_XDECREF(mids);
    Py_XDECREF(offs);
    Py_XDECREF(durs);
    stats_clear(c);
    return NULL;
}

/* ---- XPlane ---------------------------------------------------------------------------------------- */

typedef struct {
    cptr a, b;
} Seg;

static PyObject *
parse_plane(Ctx *c, cptr start, cptr end)
{
    cptr p = start, sub_end, seg_start = start;
    uint64_t tag, id = 0;
    PyObject *name = NULL, *lines = NULL, *head = NULL, *line;
    Seg *segs = NULL;
    size_t nseg = 0, capseg = 0, head_len = 0;

    name = PyUnicode_FromStringAndSize("", 0);
    lines = PyList_New(0);
    if (!name || !lines)
        goto error;

#define PUSH_SEG(A, B)                                                        \
    do {                                                                      \
        if ((A) < (B)) {                                                      \
            if (nseg == capseg) {                                             \
                size_t nc_ = capseg ? capseg * 2 : 8;                         \
                Seg *ns_ = (Seg *)PyMem_Realloc(segs, nc_ * sizeof(Seg));     \
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
        TAGV(p, end, &tag);
        switch (tag) {
        case TAG(3, WT_LEN):
            LENGTH(p, end, sub_end);
            PUSH_SEG(seg_start, tp);
            line = parse_line(c, p, sub_end);
            if (!line)
                goto error;
            if (PyList_Append(lines, line) < 0) {
                Py_DECREF(line);
                goto error;
            }
            Py_DECREF(line);
            p = sub_end;
            seg_start = p;
            break;
        case TAG(1, WT_VARINT):
            VARINT(p, end, &id);
            break;
        case TAG(2, WT_LEN):
            LENGTH(p, end, sub_end);
            if (set_str(c, &name, p, sub_end) < 0)
                goto error;
            p = sub_end;
            break;
        case TAG(4, WT_LEN):
        case TAG(5, WT_LEN):
        case TAG(6, WT_LEN): /* metadata maps and plane stats: left to upb via the head */
            LENGTH(p, end, sub_end);
            p = sub_end;
            break;
        default:
            SKIP(tp, p, end, tag, KNOWN_PLANE);
        }
    }
    PUSH_SEG(seg_start, end);
#undef PUSH_SEG

    head = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)head_len);
    if (!head)
        goto error;
    {
        char *w = PyBytes_AS_STRING(head);
        for (size_t k = 0; k < nseg; k++) {
            size_t len = (size_t)(segs[k].b - segs[k].a);
            memcpy(w, segs[k].a, len);
            w += len;
        }
    }
    PyMem_Free(segs);
    return Py_BuildValue("(LNNN)", (long long)(int64_t)id, name, head, lines);

error:
    PyMem_Free(segs);
    Py_XDECREF(name);
    Py_XDECREF(lines);
    Py_XDECREF(head);
    return NULL;
}

/* ---- XSpace ---------------------------------------------------------------------------------------- */

static PyObject *
read_space(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    Ctx ctx;
    Ctx *c = &ctx;
    PyObject *planes = NULL, *hostnames = NULL, *obj;
    uint64_t tag;
    cptr p, end, sub_end;

    (void)self;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    memset(&ctx, 0, sizeof ctx);
    p = (cptr)view.buf;
    end = p + view.len;
    c->base = p;
    c->hard_end = end;

    planes = PyList_New(0);
    hostnames = PyList_New(0);
    if (!planes || !hostnames)
        goto error;

    while (p < end) {
        cptr tp = p;
        TAGV(p, end, &tag);
        switch (tag) {
        case TAG(1, WT_LEN):
            LENGTH(p, end, sub_end);
            obj = parse_plane(c, p, sub_end);
            if (!obj)
                goto error;
            if (PyList_Append(planes, obj) < 0) {
                Py_DECREF(obj);
                goto error;
            }
            Py_DECREF(obj);
            p = sub_end;
            break;
        case TAG(2, WT_LEN): /* errors, warnings: validated (as upb would), not returned */
        case TAG(3, WT_LEN):
        case TAG(4, WT_LEN):
            LENGTH(p, end, sub_end);
            obj = make_str(c, p, sub_end);
            if (!obj)
                goto error;
            if (tag == TAG(4, WT_LEN) && PyList_Append(hostnames, obj) < 0) {
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
    PyBuffer_Release(&view);
    return Py_BuildValue("(NN)", planes, hostnames);

error:
    stats_clear(c);
    PyBuffer_Release(&view);
    Py_XDECREF(planes);
    Py_XDECREF(hostnames);
    return NULL;
}

static PyMethodDef methods[] = {
    {"read_space", read_space, METH_O,
     "read_space(buffer) -> (planes, hostnames); see tracekit/wire.py for the layout."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "tracekit._wire", "Bounds-checked XSpace wire decoder (see tracekit/wire.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__wire(void)
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
    return m;
}
