/* hutch_broker.store._runs: records.decode_run's loop in C, its results and refusals the same.
 *
 * Why C, and why only this loop: a stream delivery spent about 4.9 us of its ~18 us of broker
 * CPU (in process) in records.decode_run (unpacking each record's header and fields, one CRC
 * call per record with its seed, five slices and a tuple), all of it interpreter work around a
 * few bytes. The same loop here costs under 1 us a record, and the whole broker spends a fifth
 * less CPU per stream delivery (docs/bench/profile.md). The rest of the broker stays
 * Python; records.decode_run_python is this loop's twin, used when the extension is not built
 * (or HUTCH_BROKER_PURE_PYTHON is set), and tests/broker/store/test_runs_native.py holds the two
 * equal on real, damaged and cut runs.
 *
 * The record layout is records.py's (its module docstring): a 12-byte header (u32 CRC | u16
 * magic | u16 version | u32 payload length) then 38 bytes of fields (<QQQBBIQ) and the
 * exchange, routing key, properties and body. Every record's CRC starts from its own seed,
 * CRC32(u64 salt | u32 offset of the record in its segment), so each is verified on its own.
 *
 * Arithmetic is checked so that no input can read outside the chunk: lengths are compared in
 * unsigned 64-bit without wrapping, and a record whose index length is not its framed length
 * ends the run (the Python twin checks the same).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <zlib.h>

#define HEADER_SIZE 12
#define CRC_SIZE 4
#define FIELDS_SIZE 38
#define RECORD_MAGIC 0x5248
#define RECORD_VERSION 2
#define MAX_OFFSET 0xFFFFFFFFULL /* the seed holds a u32 offset */

static inline uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static inline uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static inline uint64_t rd64(const unsigned char *p) {
    return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32);
}

/* CRC32 of (u64 salt | u32 offset), little-endian: records.record_seed. */
static uLong record_seed(uint64_t salt, uint64_t offset) {
    unsigned char seed[12];
    for (int k = 0; k < 8; k++) seed[k] = (unsigned char)(salt >> (8 * k));
    for (int k = 0; k < 4; k++) seed[8 + k] = (unsigned char)(offset >> (8 * k));
    return crc32(0L, seed, sizeof seed);
}

/* zlib's crc32 takes a uInt length: feed longer ranges in pieces. */
static uLong crc_range(uLong crc, const unsigned char *p, size_t n) {
    while (n > 0) {
        uInt step = n > 0x40000000u ? 0x40000000u : (uInt)n;
        crc = crc32(crc, p, step);
        p += step;
        n -= step;
    }
    return crc;
}

static int as_u64(PyObject *obj, const char *what, uint64_t *out) {
    unsigned long long value = PyLong_AsUnsignedLongLong(obj);
    if (value == (unsigned long long)-1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError) || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "decode_run: %s must be an int in [0, 2**64)", what);
        }
        return -1;
    }
    *out = (uint64_t)value;
    return 0;
}

/* One record's tuple (record_type's layout: RunRecord). NULL with an exception set on failure. */
static PyObject *new_record(PyTypeObject *record_type, const unsigned char *buf, Py_ssize_t start,
                            Py_ssize_t key_start, Py_ssize_t properties_start,
                            Py_ssize_t body_start, Py_ssize_t end, uint64_t record_id,
                            uint64_t enqueued, uint64_t expire_at, PyObject *length) {
    PyObject *record = record_type->tp_alloc(record_type, 8);
    if (record == NULL) return NULL;
    PyObject *items[8] = {
        PyLong_FromUnsignedLongLong(record_id),
        PyLong_FromUnsignedLongLong(enqueued),
        PyLong_FromUnsignedLongLong(expire_at),
        PyUnicode_DecodeUTF8((const char *)buf + start + FIELDS_SIZE,
                             key_start - start - FIELDS_SIZE, "surrogatepass"),
        PyUnicode_DecodeUTF8((const char *)buf + key_start, properties_start - key_start,
                             "surrogatepass"),
        PyBytes_FromStringAndSize((const char *)buf + properties_start,
                                  body_start - properties_start),
        PyBytes_FromStringAndSize((const char *)buf + body_start, end - body_start),
        length,
    };
    Py_INCREF(length);
    int failed = 0;
    for (int k = 0; k < 8; k++) {
        if (items[k] == NULL) failed = 1;
        PyTuple_SET_ITEM(record, k, items[k]); /* a NULL item is skipped by the tuple's dealloc */
    }
    if (failed) {
        Py_DECREF(record);
        return NULL;
    }
    return record;
}

PyDoc_STRVAR(decode_run_doc,
             "decode_run(record_type, chunk, msg_id, lengths, salt, offset) -> list\n\n"
             "records.decode_run in C: record_type is records.RunRecord.");

static PyObject *decode_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "decode_run takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "decode_run: record_type must be a tuple type");
        return NULL;
    }
    PyTypeObject *record_type = (PyTypeObject *)args[0];
    if (!PyBytes_Check(args[1]) || !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "decode_run: chunk must be bytes and lengths a list");
        return NULL;
    }
    PyObject *lengths = args[3];
    uint64_t msg_id, salt, offset;
    if (as_u64(args[2], "msg_id", &msg_id) < 0 || as_u64(args[4], "salt", &salt) < 0 ||
        as_u64(args[5], "offset", &offset) < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(args[1]);
    const Py_ssize_t size = PyBytes_GET_SIZE(args[1]);

    PyObject *found = PyList_New(0);
    if (found == NULL) return NULL;
    Py_INCREF(lengths); /* held while allocations (and so any finalizer) may run */
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lengths); i++) {
        PyObject *length_obj = PyList_GET_ITEM(lengths, i);
        Py_INCREF(length_obj);
        Py_ssize_t length = PyLong_AsSsize_t(length_obj);
        if (length == -1 && PyErr_Occurred()) {
            Py_DECREF(length_obj);
            if (!PyErr_ExceptionMatches(PyExc_OverflowError)) goto fail;
            PyErr_Clear(); /* no record is that long: a length that disagrees, as below */
            break;
        }
        /* size - at >= 0 always holds: at only grows by whole records that ended in the chunk. */
        if (size - at < HEADER_SIZE) {
            Py_DECREF(length_obj);
            break;
        }
        const unsigned char *head = buf + at;
        uint32_t crc = rd32(head);
        uint32_t payload_length = rd32(head + 8);
        Py_ssize_t start = at + HEADER_SIZE;
        if (rd16(head + 4) != RECORD_MAGIC || rd16(head + 6) != RECORD_VERSION ||
            payload_length < FIELDS_SIZE || (uint64_t)payload_length > (uint64_t)(size - start) ||
            (uint64_t)length != (uint64_t)HEADER_SIZE + payload_length) {
            Py_DECREF(length_obj);
            break;
        }
        Py_ssize_t end = start + (Py_ssize_t)payload_length;
        if (offset + (uint64_t)at > MAX_OFFSET) {
            Py_DECREF(length_obj);
            PyErr_SetString(PyExc_ValueError, "decode_run: offset beyond a segment's 4 GiB");
            goto fail;
        }
        uLong computed = record_seed(salt, offset + (uint64_t)at);
        computed = crc_range(computed, head + CRC_SIZE, (size_t)(end - at - CRC_SIZE));
        const unsigned char *fields = buf + start;
        uint64_t record_id = rd64(fields);
        Py_ssize_t exchange_length = fields[24];
        Py_ssize_t key_length = fields[25];
        Py_ssize_t key_start = start + FIELDS_SIZE + exchange_length;
        Py_ssize_t properties_start = key_start + key_length;
        uint64_t properties_length = rd32(fields + 26);
        uint64_t body_length = rd64(fields + 30);
        /* The lengths must add up to the payload: compared without overflow. */
        if ((uint32_t)computed != crc || (uint64_t)at > record_id ||
            record_id - (uint64_t)at != msg_id || properties_start > end ||
            properties_length > (uint64_t)(end - properties_start) ||
            body_length != (uint64_t)(end - properties_start) - properties_length) {
            Py_DECREF(length_obj);
            break;
        }
        Py_ssize_t body_start = properties_start + (Py_ssize_t)properties_length;
        PyObject *record =
            new_record(record_type, buf, start, key_start, properties_start, body_start, end,
                       record_id, rd64(fields + 8), rd64(fields + 16), length_obj);
        Py_DECREF(length_obj);
        if (record == NULL) goto fail;
        int appended = PyList_Append(found, record);
        Py_DECREF(record);
        if (appended < 0) goto fail;
        at = end;
    }
    Py_DECREF(lengths);
    return found;
fail:
    Py_DECREF(lengths);
    Py_DECREF(found);
    return NULL;
}

static PyMethodDef methods[] = {
    {"decode_run", (PyCFunction)(void (*)(void))decode_run, METH_FASTCALL, decode_run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef_Slot slots[] = {
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hutch_broker.store._runs",
    .m_doc = "records.decode_run's loop in C (see records.decode_run_python, its twin).",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit__runs(void) { return PyModuleDef_Init(&module); }
