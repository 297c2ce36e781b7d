/* The replay's two loops in C (optional; tracekit.analysis.replay.walk has the same loops in Python and picks one).
 *
 * order(dep_ptr, dep, out) -> count
 *     Kahn's algorithm over quantities 0..nq-1 whose dependents are dep[dep_ptr[q]:dep_ptr[q+1]]: the quantities
 *     with no dependency first (ascending), then each dependent as its last dependency is taken (FIFO). Writes the
 *     order into out (int64[nq]) and returns how many it placed (fewer than nq: a cycle).
 *
 * evaluate(order, pptr, psrc, pkind, origin, slack, work, free, kind, window, qprev, parent, nowait, after, tail,
 *          gid, gexit, has_child, gcore, gptr, gmem, consts, S, E, why_s, why_e)
 *     One pass over ``order`` computing every node's start S and end E as the module docstring of
 *     tracekit.analysis.replay.engine defines them; consts = (END, DONE, WIN). Writes S, E, why_s, why_e
 *     (int64[n]). Every array is C-contiguous int64 but free and has_child (uint8); the caller (walk.py) makes
 *     them so and checks nothing else reaches here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#define NEG (-((int64_t)1 << 62))

typedef struct {
    Py_buffer v;
    int held;
} Buf;

static int get(PyObject *o, Buf *b, Py_ssize_t itemsize, Py_ssize_t n, int writable, const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, &b->v, flags) < 0)
        return -1;
    b->held = 1;
    if (b->v.itemsize != itemsize || (n >= 0 && b->v.len != n * itemsize)) {
        PyErr_Format(PyExc_ValueError, "walkc: %s: %zd bytes of %zd-byte items, expected %zd items", name,
                     b->v.len, b->v.itemsize, n);
        return -1;
    }
    return 0;
}

static void release(Buf *bufs, int count)
{
    for (int i = 0; i < count; i++)
        if (bufs[i].held) {
            PyBuffer_Release(&bufs[i].v);
            bufs[i].held = 0;
        }
}

#define I64(b) ((int64_t *)(b).v.buf)
#define U8(b) ((uint8_t *)(b).v.buf)

static PyObject *walk_order(PyObject *self, PyObject *args)
{
    PyObject *o_ptr, *o_dep, *o_out;
    if (!PyArg_ParseTuple(args, "OOO", &o_ptr, &o_dep, &o_out))
        return NULL;
    Buf b[3];
    for (int i = 0; i < 3; i++)
        b[i].held = 0;
    if (get(o_ptr, &b[0], 8, -1, 0, "dep_ptr") < 0 || get(o_dep, &b[1], 8, -1, 0, "dep") < 0) {
        release(b, 3);
        return NULL;
    }
    Py_ssize_t nq = b[0].v.len / 8 - 1, m = b[1].v.len / 8;
    if (nq < 0 || get(o_out, &b[2], 8, nq, 1, "out") < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "walkc: dep_ptr is empty");
        release(b, 3);
        return NULL;
    }
    const int64_t *ptr = I64(b[0]), *dep = I64(b[1]);
    int64_t *out = I64(b[2]);
    if (ptr[0] != 0 || ptr[nq] != m) {
        release(b, 3);
        PyErr_SetString(PyExc_ValueError, "walkc: dep_ptr does not span dep");
        return NULL;
    }
    for (Py_ssize_t e = 0; e < m; e++)
        if (dep[e] < 0 || dep[e] >= nq) {
            release(b, 3);
            PyErr_SetString(PyExc_ValueError, "walkc: a dependent out of range");
            return NULL;
        }
    int64_t *need = calloc(nq ? (size_t)nq : 1, sizeof(int64_t));
    if (!need) {
        release(b, 3);
        return PyErr_NoMemory();
    }
    Py_ssize_t head = 0, tail = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t e = 0; e < m; e++)
        need[dep[e]]++;
    for (Py_ssize_t q = 0; q < nq; q++)
        if (need[q] == 0)
            out[tail++] = q;
    while (head < tail) {
        int64_t q = out[head++];
        for (int64_t e = ptr[q]; e < ptr[q + 1]; e++)
            if (--need[dep[e]] == 0)
                out[tail++] = dep[e];
    }
    Py_END_ALLOW_THREADS
    free(need);
    release(b, 3);
    return PyLong_FromSsize_t(tail);
}

enum {
    B_ORDER, B_PPTR, B_PSRC, B_PKIND, B_ORIGIN, B_SLACK, B_WORK, B_FREE, B_KIND, B_WINDOW, B_QPREV, B_PARENT,
    B_NOWAIT, B_AFTER, B_TAIL, B_GID, B_GEXIT, B_HASCHILD, B_GCORE, B_GPTR, B_GMEM, B_S, B_E, B_WHYS, B_WHYE, NB
};

static PyObject *walk_evaluate(PyObject *self, PyObject *args)
{
    PyObject *o[NB];
    int END, DONE, WIN;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOOOOOOO(iii)OOOO", &o[B_ORDER], &o[B_PPTR], &o[B_PSRC], &o[B_PKIND],
                          &o[B_ORIGIN], &o[B_SLACK], &o[B_WORK], &o[B_FREE], &o[B_KIND], &o[B_WINDOW], &o[B_QPREV],
                          &o[B_PARENT], &o[B_NOWAIT], &o[B_AFTER], &o[B_TAIL], &o[B_GID], &o[B_GEXIT],
                          &o[B_HASCHILD], &o[B_GCORE], &o[B_GPTR], &o[B_GMEM], &END, &DONE, &WIN, &o[B_S], &o[B_E],
                          &o[B_WHYS], &o[B_WHYE]))
        return NULL;
    Buf b[NB];
    for (int i = 0; i < NB; i++)
        b[i].held = 0;
    static const char *names[NB] = {"order", "pptr", "psrc", "pkind", "origin", "slack", "work", "free", "kind",
                                    "window", "qprev", "parent", "nowait", "after", "tail", "gid", "gexit",
                                    "has_child", "gcore", "gptr", "gmem", "S", "E", "why_s", "why_e"};
    if (get(o[B_PPTR], &b[B_PPTR], 8, -1, 0, "pptr") < 0 || get(o[B_GPTR], &b[B_GPTR], 8, -1, 0, "gptr") < 0) {
        release(b, NB);
        return NULL;
    }
    Py_ssize_t n = b[B_PPTR].v.len / 8 - 1, G = b[B_GPTR].v.len / 8 - 1;
    if (n < 0 || G < 0) {
        release(b, NB);
        PyErr_SetString(PyExc_ValueError, "walkc: pptr or gptr is empty");
        return NULL;
    }
    for (int i = 0; i < NB; i++) {
        if (i == B_PPTR || i == B_GPTR)
            continue;
        Py_ssize_t want = -1, size = 8;
        if (i == B_FREE || i == B_HASCHILD)
            size = 1;
        if (i == B_GCORE)
            want = G;
        else if (i != B_ORDER && i != B_PSRC && i != B_PKIND && i != B_GMEM)
            want = n;
        if (get(o[i], &b[i], size, want, i >= B_S, names[i]) < 0) {
            release(b, NB);
            return NULL;
        }
    }
    const int64_t *pptr = I64(b[B_PPTR]), *gptr = I64(b[B_GPTR]);
    Py_ssize_t m = b[B_PSRC].v.len / 8, nm = b[B_GMEM].v.len / 8, nq = b[B_ORDER].v.len / 8;
    int bad = b[B_PKIND].v.len / 8 != m || pptr[0] != 0 || pptr[n] != m || gptr[0] != 0 || gptr[G] != nm;
    for (Py_ssize_t i = 0; !bad && i < n; i++)
        bad = pptr[i] > pptr[i + 1];
    for (Py_ssize_t g = 0; !bad && g < G; g++)
        bad = gptr[g] > gptr[g + 1];
    const int64_t *ord = I64(b[B_ORDER]), *psrc = I64(b[B_PSRC]), *gmem = I64(b[B_GMEM]);
    const int64_t *window = I64(b[B_WINDOW]), *qprev = I64(b[B_QPREV]), *parent = I64(b[B_PARENT]);
    const int64_t *gid = I64(b[B_GID]);
    for (Py_ssize_t k = 0; !bad && k < nq; k++)
        bad = ord[k] < 0 || ord[k] >= 2 * n + G;
    for (Py_ssize_t e = 0; !bad && e < m; e++)
        bad = psrc[e] < 0 || psrc[e] >= n;
    for (Py_ssize_t e = 0; !bad && e < nm; e++)
        bad = gmem[e] < 0 || gmem[e] >= n;
    for (Py_ssize_t i = 0; !bad && i < n; i++)
        bad = window[i] >= n || qprev[i] >= n || parent[i] >= n || gid[i] >= G;
    if (bad) {
        release(b, NB);
        PyErr_SetString(PyExc_ValueError, "walkc: an index out of range");
        return NULL;
    }
    int64_t *A = malloc((G ? (size_t)G : 1) * sizeof(int64_t)), *who_a = malloc((G ? (size_t)G : 1) * sizeof(int64_t));
    int64_t *lc = malloc((n ? (size_t)n : 1) * sizeof(int64_t)), *lcq = malloc((n ? (size_t)n : 1) * sizeof(int64_t));
    if (!A || !who_a || !lc || !lcq) {
        free(A);
        free(who_a);
        free(lc);
        free(lcq);
        release(b, NB);
        return PyErr_NoMemory();
    }
    const int64_t *pkind = I64(b[B_PKIND]), *origin = I64(b[B_ORIGIN]), *sl = I64(b[B_SLACK]), *w = I64(b[B_WORK]);
    const int64_t *kind = I64(b[B_KIND]), *nowait = I64(b[B_NOWAIT]), *after = I64(b[B_AFTER]);
    const int64_t *ptail = I64(b[B_TAIL]), *gexit = I64(b[B_GEXIT]), *gcore = I64(b[B_GCORE]);
    const uint8_t *fr = U8(b[B_FREE]), *has_child = U8(b[B_HASCHILD]);
    int64_t *S = I64(b[B_S]), *E = I64(b[B_E]), *why_s = I64(b[B_WHYS]), *why_e = I64(b[B_WHYE]);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        S[i] = E[i] = 0;
        why_s[i] = why_e[i] = -1;
        lc[i] = NEG;
        lcq[i] = -1;
    }
    for (Py_ssize_t g = 0; g < G; g++) {
        A[g] = NEG;
        who_a[g] = -1;
    }
    for (Py_ssize_t k = 0; k < nq; k++) {
        int64_t q = ord[k];
        if (q < 2 * n) {
            int64_t i = q >> 1;
            if ((q & 1) == 0) { /* S */
                int64_t best = NEG, arg = -1;
                for (int64_t e = pptr[i]; e < pptr[i + 1]; e++) {
                    int64_t s = psrc[e];
                    int end = pkind[e] == END;
                    int64_t t = end ? E[s] : S[s];
                    if (t > best) {
                        best = t;
                        arg = end ? 2 * s + 1 : 2 * s;
                    }
                }
                if (arg < 0)
                    best = origin[i];
                S[i] = best + sl[i];
                why_s[i] = arg;
            } else { /* E */
                int64_t s_i = S[i], e_i, arg;
                int64_t kd = kind[i];
                if (fr[i]) {
                    e_i = s_i;
                    arg = 2 * i;
                } else if (gid[i] >= 0) {
                    int64_t g = gid[i];
                    e_i = A[g] + gcore[g] + gexit[i];
                    arg = 2 * who_a[g];
                } else if (has_child[i]) {
                    int64_t a = lc[i] + ptail[i];
                    e_i = a > s_i ? a : s_i;
                    arg = lcq[i];
                } else if (kd == DONE && window[i] >= 0) {
                    int64_t a = s_i + nowait[i], c = E[window[i]] + after[i];
                    if (a >= c) {
                        e_i = a;
                        arg = 2 * i;
                    } else {
                        e_i = c;
                        arg = 2 * window[i] + 1;
                    }
                } else if (kd == WIN && qprev[i] >= 0 && E[qprev[i]] > s_i) {
                    e_i = E[qprev[i]] + w[i];
                    arg = 2 * qprev[i] + 1;
                } else {
                    e_i = s_i + w[i];
                    arg = 2 * i;
                }
                E[i] = e_i;
                why_e[i] = arg;
                int64_t p = parent[i];
                if (p >= 0 && e_i > lc[p]) {
                    lc[p] = e_i;
                    lcq[p] = q;
                }
            }
        } else {
            int64_t g = q - 2 * n, best = NEG, arg = -1;
            for (int64_t e = gptr[g]; e < gptr[g + 1]; e++)
                if (S[gmem[e]] > best) {
                    best = S[gmem[e]];
                    arg = gmem[e];
                }
            A[g] = best;
            who_a[g] = arg;
        }
    }
    Py_END_ALLOW_THREADS
    free(A);
    free(who_a);
    free(lc);
    free(lcq);
    release(b, NB);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"order", walk_order, METH_VARARGS, "Kahn's order of a dependency graph in CSR form (see the module source)."},
    {"evaluate", walk_evaluate, METH_VARARGS, "One replay pass over a topological order (see the module source)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "walkc", "The replay's loops in C.", -1, methods};

PyMODINIT_FUNC PyInit_walkc(void) { return PyModule_Create(&module); }
