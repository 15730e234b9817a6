/* hutch_spark._framescan: framescan.scan_python's loop in C, its results and stops the same.
 *
 * Why C, and why only this loop: an executor reading a stream slice spent about 6 us of CPU a
 * message in streamframes.SliceParser._deliveries (seven struct calls, a key built from three
 * slices, a dict lookup and three appends per delivery), all of it interpreter work around a
 * few bytes, and the executors' reader, not the broker, had become the larger cost of a stream
 * message (docs/bench/profile.md). This loop takes the common case only: consecutive
 * deliveries of one template (the same exchange, routing key and properties but for the
 * x-stream-offset value), each one header frame and one non-empty body frame, at the offsets
 * expected next. Everything else (the first delivery of a template, a gap, several body
 * frames, a frame of another kind, an incomplete tail) stops it, and the parser's Python path
 * takes that delivery as before. framescan.scan_python is its twin, used when the extension is
 * not built (or HUTCH_SPARK_PURE_PYTHON is set); tests/spark/test_framescan.py holds the two
 * equal on real, cut and damaged frames.
 *
 * Every read is bounds-checked against the buffer, and every field against its frame: no input
 * makes it read outside the bytes it was given. Lengths are compared in 64-bit unsigned
 * arithmetic that cannot wrap (a frame length is at most 2^32 - 1).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define METHOD 1
#define HEADER 2
#define BODY 3
#define FRAME_END 0xCE
#define BASIC_DELIVER ((60u << 16) | 60u)

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t be64(const unsigned char *p) {
    return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

/* scan(buf, pos, key, at, expected, end) -> (pos, bodies, tag); see framescan.scan_python. */
static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view, keyview;
    Py_ssize_t start, at;
    long long expected, end_offset;
    if (!PyArg_ParseTuple(args, "y*ny*nLL", &view, &start, &keyview, &at, &expected,
                          &end_offset))
        return NULL;
    const unsigned char *b = view.buf;
    const unsigned char *k = keyview.buf;
    uint64_t size = (uint64_t)view.len, klen = (uint64_t)keyview.len;
    unsigned long long tag = 0;
    PyObject *bodies = NULL;
    if (start < 0 || start > view.len) {
        PyErr_SetString(PyExc_ValueError, "scan: pos outside the buffer");
        goto fail;
    }
    uint64_t pos = (uint64_t)start;
    bodies = PyList_New(0);
    if (bodies == NULL) goto fail;
    if (at < 0) goto done;
    while (expected < end_offset) {
        /* basic.deliver's method frame, complete, with its frame end */
        if (pos + 11 > size || b[pos] != METHOD) break;
        uint64_t end = pos + 7 + be32(b + pos + 3);
        if (end >= size || b[end] != FRAME_END || end < pos + 11) break;
        if (be32(b + pos + 7) != BASIC_DELIVER) break;
        /* consumer tag, delivery tag, redelivered, exchange, routing key: inside the frame */
        uint64_t q = pos + 11;
        if (q >= end) break;
        q += 1 + b[q];
        if (q + 9 > end) break;
        unsigned long long delivery_tag = be64(b + q);
        uint64_t route = q + 9;
        if (route >= end) break;
        uint64_t route_end = route + 1 + b[route];
        if (route_end >= end) break;
        route_end += 1 + b[route_end];
        if (route_end > end) break;
        /* one content header frame: class, weight, body size, then the properties */
        uint64_t head = end + 1;
        if (head + 7 > size || b[head] != HEADER) break;
        uint64_t head_end = head + 7 + be32(b + head + 3);
        if (head_end >= size || b[head_end] != FRAME_END || head_end < head + 21) break;
        uint64_t body_size = be64(b + head + 11);
        uint64_t props = head + 19;
        /* one body frame holding the whole, non-empty body */
        uint64_t frame = head_end + 1;
        if (frame + 7 > size || b[frame] != BODY) break;
        uint64_t length = be32(b + frame + 3);
        uint64_t next = frame + 7 + length;
        if (length == 0 || length != body_size || next >= size || b[next] != FRAME_END) break;
        /* the template: route and properties but for the offset's 8 bytes at `at` */
        uint64_t value = props + (uint64_t)at;
        if (value + 8 > head_end) break;
        uint64_t route_size = route_end - route, before = value - props;
        uint64_t after = head_end - (value + 8);
        if (klen != route_size + before + after) break;
        if (memcmp(k, b + route, route_size) != 0 ||
            memcmp(k + route_size, b + props, before) != 0 ||
            memcmp(k + route_size + before, b + value + 8, after) != 0)
            break;
        long long offset = (long long)be64(b + value);
        if (offset != expected) break;
        PyObject *body = PyBytes_FromStringAndSize((const char *)b + frame + 7,
                                                   (Py_ssize_t)length);
        if (body == NULL) goto fail;
        int appended = PyList_Append(bodies, body);
        Py_DECREF(body);
        if (appended < 0) goto fail;
        expected += 1;
        tag = delivery_tag;
        pos = next + 1;
    }
done:
    PyBuffer_Release(&view);
    PyBuffer_Release(&keyview);
    return Py_BuildValue("(KNK)", (unsigned long long)pos, bodies, tag);
fail:
    Py_XDECREF(bodies);
    PyBuffer_Release(&view);
    PyBuffer_Release(&keyview);
    return NULL;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buf, pos, key, at, expected, end) -> (pos, bodies, tag): framescan.scan_python in C."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_framescan",
    "framescan.scan_python's loop in C (see framescan.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__framescan(void) { return PyModule_Create(&module); }
