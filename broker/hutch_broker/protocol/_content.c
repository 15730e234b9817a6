/* hutch_broker.protocol._content: contentscan's Python twins in C, their results the same.
 *
 * Why C, and why only this: scenario 1 of the benchmark (one publisher, one queue, one
 * consumer) runs hutch-broker's one loop at a full core, and reading a publish's content
 * header and body frames was a fifth of the read stage: two struct unpacks, a dozen
 * comparisons and two copies of the body (a bytearray slice, then bytes) per message, all
 * interpreter work around a few bytes. Here it is one call and one copy (docs/bench/profile.md).
 * contentscan.scan_python and scan_publish_python are these functions' twins, used when the
 * extension is not built (or HUTCH_BROKER_PURE_PYTHON is set);
 * tests/broker/protocol/test_content_native.py holds each pair equal on sound, cut and damaged
 * frames.
 *
 * scan(buffer, pos, channel, frame_max, max_body, last_raw): the content header frame at
 * ``pos`` and the body frames after it, when all of them are in ``buffer`` and sound (types,
 * channel, sizes within frame_max, end octets, class 60, a body size within max_body, body
 * frames adding up to it exactly); returns (raw_properties, body, position after the last
 * frame), raw_properties being ``last_raw`` itself when its bytes are the same, else None.
 * scan_publish(buffer, pos, channel, frame_max, max_body, last_payload, last_raw): the same,
 * for a whole publish at ``pos`` whose basic.publish method frame (on ``channel``, within
 * frame_max, its end octet sound) carries exactly the arguments ``last_payload`` (ticket,
 * exchange, routing key, bits: the bytes the connection decoded for the channel's last one):
 * scan's result for the content frames after it, else None. A publisher repeats its
 * arguments, so the method frame costs the connection no Python at all (contentscan.py).
 * Positions and sizes are compared in 64 bits, so no input reads outside the buffer.
 *
 * deliver(...) is the other direction, codec.deliver_frames_python in C: a delivery's three
 * frames written into one bytes object, where the struct packing, its argument tuple and the
 * join were a third of Connection.send_deliver, itself a tenth of scenario 1's CPU.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define FRAME_METHOD 1
#define FRAME_HEADER 2
#define FRAME_BODY 3
#define FRAME_END 0xCE
#define BASIC_CLASS 60
#define BASIC_PUBLISH 0x003C0028u /* class 60, method 40 */
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

/* The content frames at ``pos`` (scan's contract): a new reference to the 3-tuple, to None
 * (new reference too) when they are incomplete or not the fast path's, or NULL on an error. */
static PyObject *scan_at(const unsigned char *data, int64_t length, int64_t pos, int64_t channel,
                         int64_t frame_max, int64_t max_body, PyObject *last_raw) {
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

/* The int arguments both scans take, args[1] to args[4]: pos, channel, frame_max, max_body. */
static int read_ints(PyObject *const *args, int64_t *pos, int64_t *channel, int64_t *frame_max,
                     int64_t *max_body) {
    *pos = PyLong_AsLongLong(args[1]);
    *channel = PyLong_AsLongLong(args[2]);
    *frame_max = PyLong_AsLongLong(args[3]);
    *max_body = PyLong_AsLongLong(args[4]);
    return PyErr_Occurred() ? -1 : 0;
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
    int64_t pos, channel, frame_max, max_body;
    if (read_ints(args, &pos, &channel, &frame_max, &max_body) < 0) return NULL;
    const unsigned char *data = (const unsigned char *)PyByteArray_AS_STRING(args[0]);
    int64_t length = (int64_t)PyByteArray_GET_SIZE(args[0]);
    return scan_at(data, length, pos, channel, frame_max, max_body, args[5]);
}

/* scan_publish(buffer, pos, channel, frame_max, max_body, last_payload, last_raw): a whole
 * repeated publish at ``pos``, its basic.publish method frame's arguments the bytes of
 * ``last_payload``; scan's result for the content frames after it, else None. */
static PyObject *scan_publish(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "scan_publish() takes 7 arguments");
        return NULL;
    }
    if (!PyByteArray_Check(args[0]) || !PyBytes_Check(args[5]) || !PyBytes_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError,
                        "scan_publish(bytearray, int, int, int, int, bytes, bytes)");
        return NULL;
    }
    int64_t pos, channel, frame_max, max_body;
    if (read_ints(args, &pos, &channel, &frame_max, &max_body) < 0) return NULL;
    const unsigned char *data = (const unsigned char *)PyByteArray_AS_STRING(args[0]);
    int64_t length = (int64_t)PyByteArray_GET_SIZE(args[0]);
    if (pos < 0 || pos > length) Py_RETURN_NONE;
    int64_t payload = (int64_t)PyBytes_GET_SIZE(args[5]);
    int64_t size = frame_at(data, length, pos, FRAME_METHOD, channel, frame_max);
    if (size != 4 + payload) Py_RETURN_NONE;
    const unsigned char *method = data + pos + 7;
    if (rd32(method) != BASIC_PUBLISH ||
        memcmp(method + 4, PyBytes_AS_STRING(args[5]), (size_t)payload) != 0)
        Py_RETURN_NONE;
    return scan_at(data, length, pos + 8 + size, channel, frame_max, max_body, args[6]);
}

static inline void wr16(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

static inline void wr32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void wr64(unsigned char *p, uint64_t v) {
    wr32(p, (uint32_t)(v >> 32));
    wr32(p + 4, (uint32_t)v);
}

/* A frame's type, channel and size at ``p``; where its payload starts. */
static inline unsigned char *put_frame_header(unsigned char *p, int type, uint32_t channel,
                                              uint32_t size) {
    p[0] = (unsigned char)type;
    wr16(p + 1, channel);
    wr32(p + 3, size);
    return p + 7;
}

/* A bytes object's contents at ``p``; where they end. */
static inline unsigned char *put_bytes(unsigned char *p, PyObject *bytes) {
    Py_ssize_t size = PyBytes_GET_SIZE(bytes);
    memcpy(p, PyBytes_AS_STRING(bytes), (size_t)size);
    return p + size;
}

/* deliver(channel, const, delivery_tag, redelivered, names, raw_properties, body): a
 * basic.deliver with its content header and one body frame, as one bytes object. ``const`` is
 * the consumer's DeliverHead.const (class and method ids, the consumer tag as a shortstr),
 * ``names`` the exchange and routing key as shortstrs. The caller keeps the body within one
 * frame (frame_max); everything else is checked here, and refused with ValueError/TypeError. */
static PyObject *deliver(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "deliver() takes 7 arguments");
        return NULL;
    }
    if (!PyBytes_Check(args[1]) || !PyBytes_Check(args[4]) || !PyBytes_Check(args[5]) ||
        !PyBytes_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "deliver(int, bytes, int, bool, bytes, bytes, bytes)");
        return NULL;
    }
    long channel = PyLong_AsLong(args[0]);
    if (channel == -1 && PyErr_Occurred()) return NULL;
    unsigned long long tag = PyLong_AsUnsignedLongLong(args[2]);
    if (tag == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    int redelivered = PyObject_IsTrue(args[3]);
    if (redelivered < 0) return NULL;
    Py_ssize_t const_size = PyBytes_GET_SIZE(args[1]);
    Py_ssize_t names_size = PyBytes_GET_SIZE(args[4]);
    Py_ssize_t raw_size = PyBytes_GET_SIZE(args[5]);
    Py_ssize_t body_size = PyBytes_GET_SIZE(args[6]);
    int64_t method_size = (int64_t)const_size + 9 + names_size;
    int64_t header_size = 12 + (int64_t)raw_size;
    if (channel < 0 || channel > 0xFFFF || method_size > 0xFFFFFFFFLL ||
        header_size > 0xFFFFFFFFLL || (int64_t)body_size > 0xFFFFFFFFLL) {
        PyErr_SetString(PyExc_ValueError, "deliver(): a channel or a frame out of range");
        return NULL;
    }
    Py_ssize_t total = (Py_ssize_t)(3 * FRAME_OVERHEAD + method_size + header_size) + body_size;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    p = put_frame_header(p, FRAME_METHOD, (uint32_t)channel, (uint32_t)method_size);
    p = put_bytes(p, args[1]);
    wr64(p, (uint64_t)tag);
    p[8] = (unsigned char)(redelivered ? 1 : 0);
    p = put_bytes(p + 9, args[4]);
    *p++ = FRAME_END;
    p = put_frame_header(p, FRAME_HEADER, (uint32_t)channel, (uint32_t)header_size);
    wr16(p, BASIC_CLASS);
    wr16(p + 2, 0);
    wr64(p + 4, (uint64_t)body_size);
    p = put_bytes(p + 12, args[5]);
    *p++ = FRAME_END;
    p = put_frame_header(p, FRAME_BODY, (uint32_t)channel, (uint32_t)body_size);
    p = put_bytes(p, args[6]);
    *p = FRAME_END;
    return out;
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "A publish's content header and body frames, when complete and sound, else None."},
    {"scan_publish", (PyCFunction)(void (*)(void))scan_publish, METH_FASTCALL,
     "A whole publish repeating the last one's method arguments, as scan reads it, else None."},
    {"deliver", (PyCFunction)(void (*)(void))deliver, METH_FASTCALL,
     "A basic.deliver, its content header and one body frame, as one bytes object."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "hutch_broker.protocol._content",
    "contentscan.scan_python in C (see the source's comment).", -1, methods,
};

PyMODINIT_FUNC PyInit__content(void) { return PyModule_Create(&module); }
