/*
 * trilog.records._speedups: the per-record hot paths of RecordBatch v2, in C.
 *
 * Optional.  _v2.py and client/_partitioner.py use this module when it was built and fall
 * back to their pure-Python code, which is the readable reference, when it was not (or when
 * TRILOG_NO_SPEEDUPS=1).  Both give the same bytes, the same records and the same errors:
 * tests/records/test_speedups.py checks that property by property.
 *
 *   RecordWriter   the record section of a batch being built: append() encodes one record
 *                  (RecordBatchBuilder in _v2.py subclasses it and adds the header and CRC)
 *   decode_records the records of a batch, as a list of tuples of a given tuple subclass
 *   murmur2        Kafka's murmur2 hash of a key (the Java client's partitioner)
 *
 * Record layout (seed 003, "Record"):
 *   length varint | attributes int8 | timestamp_delta varlong | offset_delta varint
 *   | key_length varint | key | value_length varint | value
 *   | header_count varint | (key_length varint | key | value_length varint | value) * n
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define HEADER_SIZE 61 /* the RecordBatch v2 header, which precedes the records */
#define NO_TIMESTAMP (-1)
#define MAX_VARINT_BYTES 10

static PyObject *CorruptRecordsError; /* trilog.records._errors.CorruptRecordsError */

/* -- zig-zag varints ------------------------------------------------------------------------ */

static inline uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static inline Py_ssize_t varint_size(int64_t v) {
    uint64_t u = zigzag(v);
    Py_ssize_t n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

static inline char *write_varint(char *p, int64_t v) {
    uint64_t u = zigzag(v);
    while (u >= 0x80) {
        *p++ = (char)((u & 0x7F) | 0x80);
        u >>= 7;
    }
    *p++ = (char)u;
    return p;
}

/* Read a zig-zag varint from p[*pos] (reading no further than end).  Returns 0, or -1 when
 * the bytes end inside it or it does not fit 64 bits (the caller raises). */
static inline int read_varint(const unsigned char *p, Py_ssize_t end, Py_ssize_t *pos,
                              int64_t *out) {
    Py_ssize_t i = *pos;
    if (i < end && p[i] < 0x80) { /* the common one-byte case */
        *out = (int64_t)(p[i] >> 1) ^ -(int64_t)(p[i] & 1);
        *pos = i + 1;
        return 0;
    }
    uint64_t result = 0;
    for (int n = 0, shift = 0; n < MAX_VARINT_BYTES; n++, shift += 7) {
        if (i >= end)
            return -1;
        unsigned char b = p[i++];
        if (n == MAX_VARINT_BYTES - 1 && b > 1)
            return -1; /* more than 64 bits */
        result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (int64_t)((result >> 1) ^ (~(result & 1) + 1));
            *pos = i;
            return 0;
        }
    }
    return -1;
}

/* -- RecordWriter ---------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    char *buf; /* the encoded records; NULL once released */
    Py_ssize_t len, cap;
    int64_t *timestamps; /* one per record, for the producer's delivery reports */
    Py_ssize_t count, ts_cap;
    Py_ssize_t max_bytes; /* -1: no limit */
    int has_first, released;
    int64_t first_timestamp, max_timestamp, last_offset_delta;
} RecordWriter;

static PyObject *RecordWriter_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    RecordWriter *self = (RecordWriter *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->max_bytes = -1;
    self->max_timestamp = NO_TIMESTAMP;
    self->last_offset_delta = -1;
    return (PyObject *)self;
}

static void RecordWriter_dealloc(RecordWriter *self) {
    PyMem_Free(self->buf);
    PyMem_Free(self->timestamps);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A key, value or header value: None, or anything with the buffer protocol. */
typedef struct {
    Py_buffer view;
    int held;      /* view must be released */
    PyObject *ref; /* or: a reference that keeps ``data`` alive */
    const char *data;
    Py_ssize_t len; /* -1 for None */
} Field;

static int field_get(PyObject *obj, Field *f) {
    f->held = 0;
    f->ref = NULL;
    if (obj == Py_None) {
        f->data = NULL;
        f->len = -1;
        return 0;
    }
    if (PyBytes_CheckExact(obj)) {
        f->ref = Py_NewRef(obj);
        f->data = PyBytes_AS_STRING(obj);
        f->len = PyBytes_GET_SIZE(obj);
        return 0;
    }
    if (PyObject_GetBuffer(obj, &f->view, PyBUF_SIMPLE) < 0)
        return -1;
    f->held = 1;
    f->data = f->view.buf;
    f->len = f->view.len;
    return 0;
}

static void field_release(Field *f) {
    if (f->held) {
        PyBuffer_Release(&f->view);
        f->held = 0;
    }
    Py_CLEAR(f->ref);
}

static inline Py_ssize_t field_size(const Field *f) {
    return f->len < 0 ? 1 : varint_size(f->len) + f->len;
}

static inline char *field_write(char *p, const Field *f) {
    if (f->len < 0)
        return write_varint(p, -1);
    p = write_varint(p, f->len);
    memcpy(p, f->data, f->len);
    return p + f->len;
}

/* Headers: a sequence of (key, value) pairs, key str (UTF-8) or bytes, value bytes or None. */
typedef struct {
    PyObject *seq;      /* a tuple of the headers, or NULL for none */
    Py_ssize_t n;       /* number of headers */
    Field *keys, *values;
    Py_ssize_t size;    /* encoded size of the pairs (not the count) */
} Headers;

static void headers_release(Headers *h) {
    for (Py_ssize_t i = 0; i < h->n; i++) {
        if (h->keys)
            field_release(&h->keys[i]);
        if (h->values)
            field_release(&h->values[i]);
    }
    PyMem_Free(h->keys);
    PyMem_Free(h->values);
    Py_CLEAR(h->seq);
    h->keys = h->values = NULL;
    h->n = 0;
}

static int headers_get(PyObject *obj, Headers *h) {
    memset(h, 0, sizeof(*h));
    if (obj == Py_None)
        return 0;
    if (!PySequence_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "headers must be a sequence of (key, value) pairs");
        return -1;
    }
    h->seq = PySequence_Tuple(obj); /* our own tuple: the caller's list may change under us */
    if (h->seq == NULL)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(h->seq);
    if (n == 0)
        return 0;
    h->keys = PyMem_Calloc(n, sizeof(Field));
    h->values = PyMem_Calloc(n, sizeof(Field));
    if (h->keys == NULL || h->values == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(h->seq, i);
        if (!PyTuple_Check(pair) && !PyList_Check(pair)) {
            PyErr_SetString(PyExc_TypeError, "each header must be a (key, value) pair");
            goto error;
        }
        if (PySequence_Fast_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_ValueError, "each header must be a (key, value) pair");
            goto error;
        }
        PyObject *key = PySequence_Fast_GET_ITEM(pair, 0);
        PyObject *value = PySequence_Fast_GET_ITEM(pair, 1);
        h->n = i + 1; /* fields up to here are released on error */
        if (PyUnicode_Check(key)) {
            h->keys[i].data = PyUnicode_AsUTF8AndSize(key, &h->keys[i].len);
            if (h->keys[i].data == NULL)
                goto error;
            h->keys[i].ref = Py_NewRef(key);
        } else if (key == Py_None) {
            PyErr_SetString(PyExc_TypeError, "a header key must be str or bytes, not None");
            goto error;
        } else if (field_get(key, &h->keys[i]) < 0) {
            goto error;
        }
        if (field_get(value, &h->values[i]) < 0)
            goto error;
        h->size += field_size(&h->keys[i]) + field_size(&h->values[i]);
    }
    return 0;
error:
    headers_release(h);
    return -1;
}

/* Room for ``needed`` items of ``item`` bytes in the array at *buf (of *cap items). */
static int ensure_capacity(void **buf, Py_ssize_t *cap, Py_ssize_t needed, size_t item) {
    if (needed <= *cap)
        return 0;
    Py_ssize_t new_cap = *cap ? *cap : 64;
    while (new_cap < needed)
        new_cap *= 2;
    void *grown = PyMem_Realloc(*buf, (size_t)new_cap * item);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *buf = grown;
    *cap = new_cap;
    return 0;
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Encode one record at offset_delta; returns the offset delta, or None when it does not fit
 * in max_bytes and the batch is not empty. */
static PyObject *writer_append(RecordWriter *self, int64_t offset_delta, PyObject *timestamp_obj,
                               PyObject *key_obj, PyObject *value_obj, PyObject *headers_obj) {
    if (self->released) {
        PyErr_SetString(PyExc_ValueError, "the batch was built and released: no more records");
        return NULL;
    }
    int64_t timestamp;
    if (timestamp_obj == Py_None) {
        timestamp = now_ms();
    } else {
        timestamp = PyLong_AsLongLong(timestamp_obj);
        if (timestamp == -1 && PyErr_Occurred())
            return NULL;
    }
    int64_t first = self->has_first ? self->first_timestamp : timestamp;
    int64_t ts_delta;
    if (__builtin_sub_overflow(timestamp, first, &ts_delta)) {
        PyErr_SetString(PyExc_OverflowError, "timestamp delta does not fit in 64 bits");
        return NULL;
    }
    Field key, value;
    Headers headers = {0};
    if (field_get(key_obj, &key) < 0)
        return NULL;
    if (field_get(value_obj, &value) < 0) {
        field_release(&key);
        return NULL;
    }
    if (headers_obj != NULL && headers_obj != Py_None &&
        !(PyTuple_CheckExact(headers_obj) && PyTuple_GET_SIZE(headers_obj) == 0) &&
        headers_get(headers_obj, &headers) < 0)
        goto error;

    Py_ssize_t body = 1 + varint_size(ts_delta) + varint_size(offset_delta) + field_size(&key) +
                      field_size(&value) + varint_size(headers.n) + headers.size;
    Py_ssize_t total = varint_size(body) + body;
    if (self->max_bytes >= 0 && self->count > 0 &&
        HEADER_SIZE + self->len + total > self->max_bytes) {
        field_release(&key);
        field_release(&value);
        headers_release(&headers);
        Py_RETURN_NONE;
    }
    void *buf = self->buf, *timestamps = self->timestamps;
    int failed = ensure_capacity(&buf, &self->cap, self->len + total, 1) < 0 ||
                 ensure_capacity(&timestamps, &self->ts_cap, self->count + 1,
                                 sizeof(int64_t)) < 0;
    self->buf = buf;
    self->timestamps = timestamps;
    if (failed)
        goto error;

    char *p = self->buf + self->len;
    p = write_varint(p, body);
    *p++ = 0; /* attributes: unused */
    p = write_varint(p, ts_delta);
    p = write_varint(p, offset_delta);
    p = field_write(p, &key);
    p = field_write(p, &value);
    p = write_varint(p, headers.n);
    for (Py_ssize_t i = 0; i < headers.n; i++) {
        p = field_write(p, &headers.keys[i]);
        p = field_write(p, &headers.values[i]);
    }
    self->len += total;
    field_release(&key);
    field_release(&value);
    headers_release(&headers);

    if (!self->has_first) {
        self->has_first = 1;
        self->first_timestamp = timestamp;
    }
    if (timestamp > self->max_timestamp)
        self->max_timestamp = timestamp;
    self->timestamps[self->count++] = timestamp;
    self->last_offset_delta = offset_delta;
    return PyLong_FromLongLong(offset_delta);

error:
    field_release(&key);
    field_release(&value);
    headers_release(&headers);
    return NULL;
}

/* append(timestamp, key, value, headers=()): positional or keyword, as the Python twin. */
static PyObject *RecordWriter_append(RecordWriter *self, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames) {
    static const char *const names[] = {"timestamp", "key", "value", "headers"};
    PyObject *values[4] = {NULL, NULL, NULL, NULL};
    if (nargs > 4) {
        PyErr_Format(PyExc_TypeError, "append() takes at most 4 arguments (%zd given)", nargs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        values[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int found = 0;
        for (int i = 0; i < 4 && !found; i++) {
            if (PyUnicode_CompareWithASCIIString(name, names[i]) == 0) {
                if (values[i] != NULL) {
                    PyErr_Format(PyExc_TypeError, "append() got multiple values for '%s'",
                                 names[i]);
                    return NULL;
                }
                values[i] = args[nargs + k];
                found = 1;
            }
        }
        if (!found) {
            PyErr_Format(PyExc_TypeError, "append() got an unexpected keyword argument '%U'",
                         name);
            return NULL;
        }
    }
    for (int i = 0; i < 3; i++) {
        if (values[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "append() missing required argument '%s'", names[i]);
            return NULL;
        }
    }
    return writer_append(self, self->count, values[0], values[1], values[2], values[3]);
}

static PyObject *RecordWriter_append_at(RecordWriter *self, PyObject *const *args,
                                        Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "_append_at(offset_delta, timestamp, key, value, headers) takes 5 arguments");
        return NULL;
    }
    int64_t delta = PyLong_AsLongLong(args[0]);
    if (delta == -1 && PyErr_Occurred())
        return NULL;
    return writer_append(self, delta, args[1], args[2], args[3], args[4]);
}

static PyObject *RecordWriter_getvalue(RecordWriter *self, PyObject *Py_UNUSED(ignored)) {
    if (self->released) {
        PyErr_SetString(PyExc_ValueError, "the batch was built and released: no more records");
        return NULL;
    }
    return PyBytes_FromStringAndSize(self->buf ? self->buf : "", self->len);
}

static PyObject *RecordWriter_release(RecordWriter *self, PyObject *Py_UNUSED(ignored)) {
    PyMem_Free(self->buf);
    self->buf = NULL;
    self->cap = 0;
    self->released = 1;
    Py_RETURN_NONE;
}

static PyObject *RecordWriter_timestamp_at(RecordWriter *self, PyObject *arg) {
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0 || i >= self->count) {
        PyErr_SetString(PyExc_IndexError, "no record at that index");
        return NULL;
    }
    return PyLong_FromLongLong(self->timestamps[i]);
}

static Py_ssize_t RecordWriter_len(RecordWriter *self) { return self->count; }

static PyObject *get_size_in_bytes(RecordWriter *self, void *closure) {
    return PyLong_FromSsize_t(HEADER_SIZE + self->len);
}

static PyObject *get_first_timestamp(RecordWriter *self, void *closure) {
    if (!self->has_first)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(self->first_timestamp);
}

static PyObject *get_max_timestamp(RecordWriter *self, void *closure) {
    return PyLong_FromLongLong(self->max_timestamp);
}

static PyObject *get_last_offset_delta(RecordWriter *self, void *closure) {
    return PyLong_FromLongLong(self->last_offset_delta);
}

static PyObject *get_max_bytes(RecordWriter *self, void *closure) {
    if (self->max_bytes < 0)
        Py_RETURN_NONE;
    return PyLong_FromSsize_t(self->max_bytes);
}

static int set_max_bytes(RecordWriter *self, PyObject *value, void *closure) {
    if (value == NULL || value == Py_None) {
        self->max_bytes = -1;
        return 0;
    }
    Py_ssize_t v = PyLong_AsSsize_t(value);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0) {
        PyErr_SetString(PyExc_ValueError, "max_bytes must be None or at least 0");
        return -1;
    }
    self->max_bytes = v;
    return 0;
}

static PyMethodDef RecordWriter_methods[] = {
    {"append", (PyCFunction)(void (*)(void))RecordWriter_append, METH_FASTCALL | METH_KEYWORDS,
     "append(timestamp, key, value, headers=()) -> offset delta, or None when full\n\n"
     "timestamp None means now.  See RecordBatchBuilder.append."},
    {"_append_at", (PyCFunction)(void (*)(void))RecordWriter_append_at, METH_FASTCALL,
     "_append_at(offset_delta, timestamp, key, value, headers): append at an offset delta"},
    {"getvalue", (PyCFunction)RecordWriter_getvalue, METH_NOARGS,
     "The encoded records, as bytes."},
    {"release", (PyCFunction)RecordWriter_release, METH_NOARGS,
     "Drop the encoded records (once built); counts and timestamps stay."},
    {"timestamp_at", (PyCFunction)RecordWriter_timestamp_at, METH_O,
     "The timestamp of the record at an index."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef RecordWriter_getset[] = {
    {"size_in_bytes", (getter)get_size_in_bytes, NULL,
     "Uncompressed size of the batch so far, header included.", NULL},
    {"first_timestamp", (getter)get_first_timestamp, NULL, "None until a record is added.", NULL},
    {"max_timestamp", (getter)get_max_timestamp, NULL, "-1 until a record is added.", NULL},
    {"last_offset_delta", (getter)get_last_offset_delta, NULL, "-1 until a record is added.",
     NULL},
    {"max_bytes", (getter)get_max_bytes, (setter)set_max_bytes,
     "The batch's size limit (None: no limit).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods RecordWriter_as_sequence = {
    .sq_length = (lenfunc)RecordWriter_len,
};

static PyTypeObject RecordWriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "trilog.records._speedups.RecordWriter",
    .tp_doc = "The record section of a RecordBatch v2 being built (C).",
    .tp_basicsize = sizeof(RecordWriter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = RecordWriter_new,
    .tp_dealloc = (destructor)RecordWriter_dealloc,
    .tp_methods = RecordWriter_methods,
    .tp_getset = RecordWriter_getset,
    .tp_as_sequence = &RecordWriter_as_sequence,
};

/* -- decode_records -------------------------------------------------------------------------- */

static PyObject *corrupt(const char *message) {
    PyErr_SetString(CorruptRecordsError, message);
    return NULL;
}

/* A new tuple of type cls (a tuple subclass, or tuple itself) with n empty slots. */
static inline PyObject *new_tuple(PyTypeObject *cls, Py_ssize_t n) {
    if (cls == &PyTuple_Type)
        return PyTuple_New(n);
    PyObject *op = cls->tp_alloc(cls, n);
#if PY_VERSION_HEX >= 0x030E0000
    if (op != NULL) /* 3.14 caches a tuple's hash: "not computed yet", as tuple.__new__ does */
        ((PyTupleObject *)op)->ob_hash = -1;
#endif
    return op;
}

/* base + delta as a Python int (without overflow: past 64 bits, with Python ints). */
static PyObject *add_int64(int64_t base, int64_t delta) {
    int64_t sum;
    if (!__builtin_add_overflow(base, delta, &sum))
        return PyLong_FromLongLong(sum);
    PyObject *a = PyLong_FromLongLong(base), *b = PyLong_FromLongLong(delta), *r = NULL;
    if (a && b)
        r = PyNumber_Add(a, b);
    Py_XDECREF(a);
    Py_XDECREF(b);
    return r;
}

static PyObject *decode_headers(const unsigned char *p, Py_ssize_t end, Py_ssize_t *pos,
                                PyTypeObject *header_cls) {
    int64_t n;
    if (read_varint(p, end, pos, &n) < 0)
        return corrupt("malformed record in batch: bad header count");
    if (n < 0)
        return corrupt("record with a negative header count");
    if (n > end - *pos) /* every header takes two bytes at least */
        return corrupt("malformed record in batch: more headers than bytes");
    PyObject *headers = PyTuple_New(n);
    if (headers == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t klen, vlen;
        if (read_varint(p, end, pos, &klen) < 0)
            goto malformed;
        if (klen < 0) {
            Py_DECREF(headers);
            return corrupt("record header with a null key");
        }
        if (klen > end - *pos)
            goto malformed;
        PyObject *key = PyUnicode_DecodeUTF8((const char *)p + *pos, klen, "replace");
        if (key == NULL)
            goto error;
        *pos += klen;
        PyObject *value;
        if (read_varint(p, end, pos, &vlen) < 0 || vlen > end - *pos) {
            Py_DECREF(key);
            goto malformed;
        }
        if (vlen < 0) {
            value = Py_NewRef(Py_None);
        } else {
            value = PyBytes_FromStringAndSize((const char *)p + *pos, vlen);
            if (value == NULL) {
                Py_DECREF(key);
                goto error;
            }
            *pos += vlen;
        }
        PyObject *header = new_tuple(header_cls, 2);
        if (header == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto error;
        }
        PyTuple_SET_ITEM(header, 0, key);
        PyTuple_SET_ITEM(header, 1, value);
        PyTuple_SET_ITEM(headers, i, header);
    }
    return headers;
malformed:
    Py_DECREF(headers);
    return corrupt("malformed record in batch: a header runs past its record");
error:
    Py_DECREF(headers);
    return NULL;
}

static int check_tuple_type(PyObject *cls, const char *what) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyErr_Format(PyExc_TypeError, "%s must be tuple or a subclass of tuple", what);
        return -1;
    }
    return 0;
}

static PyObject *decode_records(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end, count;
    long long base_offset, base_ts;
    PyObject *log_append_obj, *prefix, *record_cls_obj, *header_cls_obj, *ts_type_obj = NULL;
    if (!PyArg_ParseTuple(args, "y*nnnLLOOOO:decode_records", &view, &pos, &end, &count,
                          &base_offset, &base_ts, &log_append_obj, &prefix, &record_cls_obj,
                          &header_cls_obj))
        return NULL;
    PyObject *result = NULL, *topic = NULL, *partition = NULL;
    int64_t log_append_ts = 0;
    int log_append = log_append_obj != Py_None;
    if (check_tuple_type(record_cls_obj, "record_cls") < 0 ||
        check_tuple_type(header_cls_obj, "header_cls") < 0)
        goto done;
    if (log_append) {
        log_append_ts = PyLong_AsLongLong(log_append_obj);
        if (log_append_ts == -1 && PyErr_Occurred())
            goto done;
    }
    if (prefix != Py_None) {
        if (!PyTuple_Check(prefix) || PyTuple_GET_SIZE(prefix) != 2) {
            PyErr_SetString(PyExc_TypeError, "topic_partition must be None or a 2-tuple");
            goto done;
        }
        topic = PyTuple_GET_ITEM(prefix, 0);
        partition = PyTuple_GET_ITEM(prefix, 1);
    }
    if (pos < 0 || end > view.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "pos and end must lie within the buffer");
        goto done;
    }
    PyTypeObject *record_cls = (PyTypeObject *)record_cls_obj;
    PyTypeObject *header_cls = (PyTypeObject *)header_cls_obj;
    Py_ssize_t nfields = topic ? 8 : 6;
    ts_type_obj = PyLong_FromLong(log_append ? 1 : 0);
    result = PyList_New(0);
    if (result == NULL || ts_type_obj == NULL)
        goto fail;
    const unsigned char *p = view.buf;
    PyObject *no_headers = PyTuple_New(0);
    if (no_headers == NULL)
        goto fail;
    for (Py_ssize_t n = 0; n < count; n++) {
        int64_t length, ts_delta, offset_delta, key_len, value_len;
        if (read_varint(p, end, &pos, &length) < 0) {
            Py_DECREF(no_headers);
            corrupt("malformed record in batch: bad record length");
            goto fail;
        }
        if (length < 6 || length > end - pos) { /* six one-byte fields at least */
            Py_DECREF(no_headers);
            corrupt("record length runs past the end of its batch");
            goto fail;
        }
        Py_ssize_t record_end = pos + length;
        pos += 1; /* attributes: unused */
        if (read_varint(p, record_end, &pos, &ts_delta) < 0 ||
            read_varint(p, record_end, &pos, &offset_delta) < 0 ||
            read_varint(p, record_end, &pos, &key_len) < 0)
            goto malformed;
        PyObject *key, *value, *headers;
        if (key_len < 0) {
            key = Py_NewRef(Py_None);
        } else {
            if (key_len > record_end - pos)
                goto malformed;
            key = PyBytes_FromStringAndSize((const char *)p + pos, key_len);
            if (key == NULL)
                goto fail_headers;
            pos += key_len;
        }
        if (read_varint(p, record_end, &pos, &value_len) < 0 ||
            (value_len >= 0 && value_len > record_end - pos)) {
            Py_DECREF(key);
            goto malformed;
        }
        if (value_len < 0) {
            value = Py_NewRef(Py_None);
        } else {
            value = PyBytes_FromStringAndSize((const char *)p + pos, value_len);
            if (value == NULL) {
                Py_DECREF(key);
                goto fail_headers;
            }
            pos += value_len;
        }
        if (pos < record_end && p[pos] == 0) { /* zero headers: the common case */
            pos += 1;
            headers = Py_NewRef(no_headers);
        } else {
            headers = decode_headers(p, record_end, &pos, header_cls);
            if (headers == NULL) {
                Py_DECREF(key);
                Py_DECREF(value);
                goto fail_headers;
            }
        }
        if (pos != record_end) {
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            Py_DECREF(no_headers);
            corrupt("record fields do not add up to its length");
            goto fail;
        }
        PyObject *offset = add_int64(base_offset, offset_delta);
        PyObject *timestamp = log_append ? PyLong_FromLongLong(log_append_ts)
                                         : add_int64(base_ts, ts_delta);
        PyObject *record = new_tuple(record_cls, nfields);
        if (offset == NULL || timestamp == NULL || record == NULL) {
            Py_XDECREF(offset);
            Py_XDECREF(timestamp);
            Py_XDECREF(record);
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            goto fail_headers;
        }
        Py_ssize_t i = 0;
        if (topic) {
            PyTuple_SET_ITEM(record, i++, Py_NewRef(topic));
            PyTuple_SET_ITEM(record, i++, Py_NewRef(partition));
        }
        PyTuple_SET_ITEM(record, i++, offset);
        PyTuple_SET_ITEM(record, i++, timestamp);
        PyTuple_SET_ITEM(record, i++, key);
        PyTuple_SET_ITEM(record, i++, value);
        PyTuple_SET_ITEM(record, i++, headers);
        PyTuple_SET_ITEM(record, i++, Py_NewRef(ts_type_obj));
        int appended = PyList_Append(result, record);
        Py_DECREF(record);
        if (appended < 0)
            goto fail_headers;
        continue;
    malformed:
        Py_DECREF(no_headers);
        corrupt("malformed record in batch: a field runs past its record");
        goto fail;
    fail_headers:
        Py_DECREF(no_headers);
        goto fail;
    }
    Py_DECREF(no_headers);
    goto done;
fail:
    Py_CLEAR(result);
done:
    Py_XDECREF(ts_type_obj);
    PyBuffer_Release(&view);
    return result;
}

/* -- murmur2 ------------------------------------------------------------------------------- */

static PyObject *murmur2(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *data = view.buf;
    const uint32_t m = 0x5BD1E995;
    Py_ssize_t length = view.len;
    uint32_t h = 0x9747B28Cu ^ (uint32_t)length;
    Py_ssize_t end4 = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < end4; i += 4) {
        uint32_t k = (uint32_t)data[i] | ((uint32_t)data[i + 1] << 8) |
                     ((uint32_t)data[i + 2] << 16) | ((uint32_t)data[i + 3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[end4 + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[end4 + 1] << 8;
        /* fall through */
    case 1:
        h ^= data[end4];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)(int32_t)h);
}

/* -- the module ------------------------------------------------------------------------------ */

static PyMethodDef module_methods[] = {
    {"decode_records", decode_records, METH_VARARGS,
     "decode_records(data, pos, end, count, base_offset, base_timestamp, log_append_time,\n"
     "               topic_partition, record_cls, header_cls) -> list\n\n"
     "The records of data[pos:end] as record_cls tuples; see _v2._decode_records."},
    {"murmur2", murmur2, METH_O, "Kafka's murmur2 hash of a bytes-like key, as a signed int32."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT, "trilog.records._speedups",
    "The per-record hot paths of RecordBatch v2 in C (optional; see _v2.py).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    PyObject *errors = PyImport_ImportModule("trilog.records._errors");
    if (errors == NULL)
        return NULL;
    CorruptRecordsError = PyObject_GetAttrString(errors, "CorruptRecordsError");
    Py_DECREF(errors);
    if (CorruptRecordsError == NULL)
        return NULL;
    if (PyType_Ready(&RecordWriterType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "RecordWriter", (PyObject *)&RecordWriterType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
