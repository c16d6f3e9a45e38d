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
 * destination; start and end are written. */
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

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS, "run(release, dur, lane_prev, has_pred, ilag, ptr, src, lag, start, end)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_replaycore", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__replaycore(void) { return PyModule_Create(&module); }
