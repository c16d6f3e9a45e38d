/* tracekit.graph._replaycore: the replay of a dependency graph (tracekit/graph/replay.py) as
 * one pass over the nodes in id order, which is a topological order (every edge goes from a
 * lower to a higher id):
 *
 *   start[i] = max(release[i], max over cross edges e into i of end[src[e]] + lag[e],
 *                  end[lane_prev[i]] + ilag[i] where i has its lane predecessor edge)
 *   end[i] = start[i] + dur[i]
 *
 * the same values replay.py's numpy blocks compute (integer arithmetic, exactly), without a
 * Python call per lane segment. Optional: replay.py falls back to its numpy code where this is
 * not built (tests/tracekit/test_graph.py compares the two).
 *
 * run(release, dur, lane_prev, has_pred, ilag, ptr, src, lag, start, end): int64 buffers but
 * has_pred (one byte per node); ptr (n + 1) indexes src/lag, the cross edges sorted by
 * destination; start and end are written.
 *
 * walks(...): the critical paths' walks back along binding edges (tracekit/graph/critical.py),
 * below. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static int get(PyObject *o, Py_buffer *b, Py_ssize_t n, Py_ssize_t itemsize, int writable, const char *what) {
    if (PyObject_GetBuffer(o, b, writable ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (n >= 0 && b->len != n * itemsize) {
        PyErr_Format(PyExc_ValueError, "replay: %s has %zd bytes, expected %zd", what, b->len, n * itemsize);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

static PyObject *run(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[10];
    if (!PyArg_UnpackTuple(args, "run", 10, 10, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8], &o[9]))
        return NULL;
    static const char *names[10] = {"release", "dur", "lane_prev", "has_pred", "ilag", "ptr", "src", "lag", "start", "end"};
    Py_buffer b[10];
    int got = 0;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(o[0], &b[0], PyBUF_C_CONTIGUOUS) < 0) return NULL;
    got = 1;
    Py_ssize_t n = b[0].len / 8;
    Py_ssize_t m = -1;
    for (int i = 1; i < 10; i++) {
        Py_ssize_t want = (i == 5) ? n + 1 : (i == 6 || i == 7) ? m : n;
        if (get(o[i], &b[i], want, i == 3 ? 1 : 8, i >= 8, names[i]) < 0) goto done;
        got = i + 1;
        if (i == 6) m = b[6].len / 8;
    }
    const int64_t *release = b[0].buf, *dur = b[1].buf, *lane_prev = b[2].buf, *ilag = b[4].buf,
                  *ptr = b[5].buf, *src = b[6].buf, *lag = b[7].buf;
    const unsigned char *has_pred = b[3].buf;
    int64_t *start = b[8].buf, *end = b[9].buf;
    const int64_t NEG = INT64_MIN / 4;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        int64_t s = release[i];
        for (int64_t e = ptr[i]; e < ptr[i + 1]; e++) {
            if (e < 0 || e >= m) { bad = 1; break; }
            int64_t u = src[e];
            if (u < 0 || u >= i) { bad = 1; break; }
            int64_t v = end[u] + lag[e];
            if (v > s) s = v;
        }
        if (has_pred[i]) {
            int64_t u = lane_prev[i];
            if (u < 0 || u >= i) { bad = 1; break; }
            if (end[u] > NEG) {
                int64_t v = end[u] + ilag[i];
                if (v > s) s = v;
            }
        }
        start[i] = s;
        end[i] = s + dur[i];
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "replay: an edge goes backwards in the node order (or its index is out of range)");
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return result;
}

/* walks(start, end, binding, src, lag, sinks, t_from): critical.py's walks, every one in a loop
 * of its own: from sinks[i] at end[sinks[i]] back to t_from[i] along the binding edges
 * (binding[v]: the edge into v that decided its start, -1 for none; src[e]: its source; lag[e]:
 * its modelled lag). Returns five bytearrays of int64 (walk, start, end, node, edge): the
 * segments walk by walk in the order given, each latest first, exactly _Walker.walk's (edge -1:
 * a node's own time; -2: time before a node nothing precedes; -3: time before a node beyond its
 * binding edge's lag, which the model does not explain; else the edge whose lag it is). Every
 * edge goes from a lower to a higher id (replay.Plan), so each walk ends; an edge that does not
 * is refused (ValueError). */
typedef struct { int64_t *a; Py_ssize_t n, cap; } Segs;

static int emit(Segs *s, int64_t w, int64_t lo, int64_t hi, int64_t v, int64_t e) {
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap ? 2 * s->cap : 4096;
        int64_t *a = PyMem_RawRealloc(s->a, (size_t)cap * 5 * sizeof(int64_t));
        if (!a) return -1;
        s->a = a;
        s->cap = cap;
    }
    int64_t *r = s->a + 5 * s->n++;
    r[0] = w; r[1] = lo; r[2] = hi; r[3] = v; r[4] = e;
    return 0;
}

static PyObject *walks(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[7];
    if (!PyArg_UnpackTuple(args, "walks", 7, 7, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6]))
        return NULL;
    static const char *names[7] = {"start", "end", "binding", "src", "lag", "sinks", "t_from"};
    Py_buffer b[7];
    int got = 0;
    PyObject *result = NULL;
    Segs segs = {NULL, 0, 0};
    Py_ssize_t n = -1, m = -1, k = -1;
    for (int i = 0; i < 7; i++) {
        Py_ssize_t want = (i <= 2) ? n : (i == 4) ? m : (i == 6) ? k : -1;
        if (get(o[i], &b[i], want, 8, 0, names[i]) < 0) goto done;
        got = i + 1;
        if (i == 0) n = b[0].len / 8;
        if (i == 3) m = b[3].len / 8;
        if (i == 5) k = b[5].len / 8;
    }
    const int64_t *start = b[0].buf, *end = b[1].buf, *binding = b[2].buf, *src = b[3].buf,
                  *lag = b[4].buf, *sinks = b[5].buf, *t_from = b[6].buf;
    int bad = 0, nomem = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < k && !bad && !nomem; i++) {
        int64_t v = sinks[i], tf = t_from[i];
        if (v < 0 || v >= n) { bad = 1; break; }
        int64_t t = end[v];
        while (t > tf) {
            int64_t s = start[v] > tf ? start[v] : tf;
            if (t > s && emit(&segs, i, s, t, v, -1) < 0) { nomem = 1; break; }
            if (s < t) t = s;
            if (t <= tf) break;
            int64_t e = binding[v];
            if (e < 0) {  /* nothing precedes it: the rest of the window is unexplained */
                if (emit(&segs, i, tf, t, v, -2) < 0) nomem = 1;
                break;
            }
            if (e >= m) { bad = 1; break; }
            int64_t u = src[e];
            if (u < 0 || u >= v) { bad = 1; break; }
            if (end[u] < t) {
                int64_t lo = end[u] > tf ? end[u] : tf;
                int64_t ready = end[u] + (lag[e] > 0 ? lag[e] : 0);  /* the model's start */
                if (ready < t) {  /* beyond the lag: unexplained */
                    int64_t mid = ready > lo ? ready : lo;
                    if (emit(&segs, i, mid, t, v, -3) < 0) { nomem = 1; break; }
                    t = mid;
                }
                if (lo < t && emit(&segs, i, lo, t, v, e) < 0) { nomem = 1; break; }
                t = lo;
            }
            v = u;
            if (end[v] < t) t = end[v];
        }
    }
    Py_END_ALLOW_THREADS
    if (nomem) {
        PyErr_NoMemory();
        goto done;
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "walks: an edge goes backwards in the node order (or an index is out of range)");
        goto done;
    }
    PyObject *cols[5] = {NULL, NULL, NULL, NULL, NULL};
    for (int j = 0; j < 5; j++) {
        cols[j] = PyByteArray_FromStringAndSize(NULL, segs.n * 8);
        if (!cols[j]) {
            for (int q = 0; q < j; q++) Py_DECREF(cols[q]);
            goto done;
        }
        int64_t *dst = (int64_t *)PyByteArray_AS_STRING(cols[j]);
        for (Py_ssize_t r = 0; r < segs.n; r++) dst[r] = segs.a[5 * r + j];
    }
    result = Py_BuildValue("(NNNNN)", cols[0], cols[1], cols[2], cols[3], cols[4]);
done:
    PyMem_RawFree(segs.a);
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS, "run(release, dur, lane_prev, has_pred, ilag, ptr, src, lag, start, end)"},
    {"walks", walks, METH_VARARGS, "walks(start, end, binding, src, lag, sinks, t_from) -> (walk, start, end, node, edge) as int64 bytearrays"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_replaycore", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__replaycore(void) { return PyModule_Create(&module); }
