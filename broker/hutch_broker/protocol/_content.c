/* hutch_broker.protocol._content: contentscan.scan_python in C, its results the same.
 *
 * Why C, and why only this: scenario 1 of the benchmark (one publisher, one queue, one
 * consumer) runs hutch-broker's one loop at a full core, and reading a publish's content
 * header and body frames was a fifth of the read stage: two struct unpacks, a dozen
 * comparisons and two copies of the body (a bytearray slice, then bytes) per message, all
 * interpreter work around a few bytes. Here it is one call and one copy (docs/bench/profile.md).
 * contentscan.scan_python is this function's twin, used when the extension is not built (or
 * HUTCH_BROKER_PURE_PYTHON is set); tests/broker/protocol/test_content_native.py holds the two
 * equal on sound, cut and damaged frames.
 *
 * scan(buffer, pos, channel, frame_max, max_body, last_raw): the content header frame at
 * ``pos`` and the body frames after it, when all of them are in ``buffer`` and sound (types,
 * channel, sizes within frame_max, end octets, class 60, a body size within max_body, body
 * frames adding up to it exactly); returns (raw_properties, body, position after the last
 * frame), raw_properties being ``last_raw`` itself when its bytes are the same, else None.
 * Positions and sizes are compared in 64 bits, so no input reads outside the buffer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define FRAME_HEADER 2
#define FRAME_BODY 3
#define FRAME_END 0xCE
#define BASIC_CLASS 60
#define FRAME_OVERHEAD 8 /* type, channel, size, end octet */
#define HEADER_FIXED 14  /* class, weight, body size, property flags */

static inline uint32_t rd32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
           (uint32_t)p[3];
}

static inline uint16_t rd16(const unsigned char *p) { return (uint16_t)((p[0] << 8) | p[1]); }

static inline uint64_t rd64(const unsigned char *p) {
    return ((uint64_t)rd32(p) << 32) | (uint64_t)rd32(p + 4);
}

/* A complete frame of ``type`` on ``channel`` at ``pos``: its payload size, or -1. */
static int64_t frame_at(const unsigned char *data, int64_t length, int64_t pos, int type,
                        int64_t channel, int64_t frame_max) {
    if (length - pos < FRAME_OVERHEAD) return -1;
    const unsigned char *p = data + pos;
    int64_t size = (int64_t)rd32(p + 3);
    if (p[0] != type || (int64_t)rd16(p + 1) != channel || size > frame_max) return -1;
    if (pos + 7 + size >= length || data[pos + 7 + size] != FRAME_END) return -1;
    return size;
}

static PyObject *scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "scan() takes 6 arguments");
        return NULL;
    }
    if (!PyByteArray_Check(args[0]) || !PyBytes_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "scan(bytearray, int, int, int, int, bytes)");
        return NULL;
    }
    int64_t pos = PyLong_AsLongLong(args[1]);
    int64_t channel = PyLong_AsLongLong(args[2]);
    int64_t frame_max = PyLong_AsLongLong(args[3]);
    int64_t max_body = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    const unsigned char *data = (const unsigned char *)PyByteArray_AS_STRING(args[0]);
    int64_t length = (int64_t)PyByteArray_GET_SIZE(args[0]);
    if (pos < 0 || pos > length) Py_RETURN_NONE;

    int64_t size = frame_at(data, length, pos, FRAME_HEADER, channel, frame_max);
    if (size < HEADER_FIXED) Py_RETURN_NONE;
    const unsigned char *header = data + pos + 7;
    uint64_t body_size = rd64(header + 4);
    if (rd16(header) != BASIC_CLASS || max_body < 0 || body_size > (uint64_t)max_body)
        Py_RETURN_NONE;
    const unsigned char *raw_start = header + 12;
    Py_ssize_t raw_size = (Py_ssize_t)(size - 12);
    int64_t next = pos + 8 + size;

    /* The body frames: where each starts and how long, before anything is allocated. */
    int64_t received = 0, first = next;
    int64_t frames = 0;
    while ((uint64_t)received < body_size) {
        int64_t piece = frame_at(data, length, next, FRAME_BODY, channel, frame_max);
        if (piece < 0 || (uint64_t)(received + piece) > body_size) Py_RETURN_NONE;
        received += piece;
        next += 8 + piece;
        frames++;
    }

    PyObject *last_raw = args[5];
    PyObject *raw;
    if (PyBytes_GET_SIZE(last_raw) == raw_size &&
        memcmp(PyBytes_AS_STRING(last_raw), raw_start, (size_t)raw_size) == 0) {
        raw = Py_NewRef(last_raw);
    } else {
        raw = PyBytes_FromStringAndSize((const char *)raw_start, raw_size);
        if (raw == NULL) return NULL;
    }
    PyObject *body = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)body_size);
    if (body == NULL) {
        Py_DECREF(raw);
        return NULL;
    }
    char *out = PyBytes_AS_STRING(body);
    int64_t at = first;
    for (int64_t k = 0; k < frames; k++) {
        int64_t piece = (int64_t)rd32(data + at + 3);
        memcpy(out, data + at + 7, (size_t)piece);
        out += piece;
        at += 8 + piece;
    }
    PyObject *end = PyLong_FromLongLong(next);
    if (end == NULL) {
        Py_DECREF(raw);
        Py_DECREF(body);
        return NULL;
    }
    PyObject *result = PyTuple_New(3);
    if (result == NULL) {
        Py_DECREF(raw);
        Py_DECREF(body);
        Py_DECREF(end);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, raw);
    PyTuple_SET_ITEM(result, 1, body);
    PyTuple_SET_ITEM(result, 2, end);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "A publish's content header and body frames, when complete and sound, else None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "hutch_broker.protocol._content",
    "contentscan.scan_python in C (see the source's comment).", -1, methods,
};

PyMODINIT_FUNC PyInit__content(void) { return PyModule_Create(&module); }
