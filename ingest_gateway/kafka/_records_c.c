/* Kafka records (record batch v2, the part after the 61-byte header) <-> Arrow buffers.
 *
 * The compiled half of ingest_gateway/kafka/records_columns.py, which documents the
 * layout and falls back to aiokafka's reader/builder when this module is not built.
 * Why C: the gateway spent most of a Kafka produce decoding records one Python object
 * at a time (~0.35 us a record through aiokafka's compiled reader plus the lists it
 * fills); here a record costs tens of nanoseconds and no Python object, and the loop
 * runs without the GIL.
 *
 * decode(records, count, first_timestamp, max_timestamp, log_append_time)
 *   -> (key_validity | None, key_offsets, key_data, key_nulls,
 *       value_validity | None, value_offsets, value_data, value_nulls,
 *       timestamps, offset_deltas, has_headers)
 *   Offsets are int32 (count + 1 of them), timestamps int64 ms, offset deltas int32,
 *   every buffer little-endian (Arrow's layout on this machine), validity bitmaps
 *   LSB-first (Arrow's). Headers are checked but not returned: has_headers says that
 *   some record has any (the caller reads such batches with aiokafka). Every length is
 *   checked against the bytes there are; malformed records raise ValueError naming the
 *   record. The input is only read.
 *
 * encode(count, key_validity | None, key_offsets, key_data, key_offset,
 *        value_validity | None, value_offsets, value_data, value_offset,
 *        timestamps, first_timestamp, offset_deltas) -> bytearray
 *   The 61 header bytes (left zero for the caller) followed by the records, without
 *   headers. Binary columns are given as Arrow buffers and the array's offset;
 *   timestamps (ms) and offset deltas are int64 buffers of count values. Offsets that
 *   decrease or point past their data raise ValueError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 61

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "Arrow buffers are read as little-endian here"
#endif

/* A zigzag varint of at most 10 bytes at p[*pos], not past end. 0, or -1 if it is
 * truncated or longer than 64 bits. */
static inline int read_varlong(const uint8_t *p, Py_ssize_t end, Py_ssize_t *pos,
                               int64_t *out) {
    uint64_t v = 0;
    int shift = 0;
    Py_ssize_t i = *pos;
    for (;;) {
        if (i >= end)
            return -1;
        uint8_t b = p[i++];
        if (shift == 63 && (b & 0xFE))
            return -1; /* the tenth byte holds one bit */
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80))
            break;
        shift += 7;
    }
    *pos = i;
    *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
    return 0;
}

static inline int varint_size(int64_t value) {
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    int n = 1;
    while (v > 0x7F) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *write_varint(uint8_t *out, int64_t value) {
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (v > 0x7F) {
        *out++ = (uint8_t)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *out++ = (uint8_t)v;
    return out;
}

/* Why a decode failed: a fixed message and the record it was in. */
typedef struct {
    const char *what;
    Py_ssize_t record;
    int64_t a, b;
} Failure;

typedef struct {
    const uint8_t *in;
    Py_ssize_t len, count;
    int64_t first_ts, max_ts;
    int log_append;
    uint8_t *kvalid, *vvalid, *kdata, *vdata;
    int32_t *koffs, *voffs, *deltas;
    int64_t *ts;
    Py_ssize_t knulls, vnulls;
    int has_headers;
    Failure fail;
} Decode;

#define FAIL(msg, x, y) do { d->fail.what = (msg); d->fail.record = i; \
    d->fail.a = (int64_t)(x); d->fail.b = (int64_t)(y); return -1; } while (0)

/* One nullable byte string (key or value) at pos, copied into data at *used. */
static inline int take_bytes(Decode *d, Py_ssize_t i, Py_ssize_t end, Py_ssize_t *pos,
                             uint8_t *valid, uint8_t *data, int32_t *offs, Py_ssize_t *used,
                             Py_ssize_t *nulls, const char *name) {
    int64_t n;
    if (read_varlong(d->in, end, pos, &n) < 0)
        FAIL("a key or value length is truncated", 0, 0);
    if (n < -1 || n > end - *pos)
        FAIL(name, n, end - *pos);
    if (n == -1) {
        (*nulls)++;
    } else {
        valid[i >> 3] |= (uint8_t)(1u << (i & 7));
        memcpy(data + *used, d->in + *pos, (size_t)n);
        *used += n;
        *pos += n;
    }
    offs[i + 1] = (int32_t)*used;
    return 0;
}

static int decode_records(Decode *d) {
    Py_ssize_t pos = 0, kused = 0, vused = 0, i = 0;
    d->koffs[0] = d->voffs[0] = 0;
    for (i = 0; i < d->count; i++) {
        int64_t length, ts_delta, offset_delta, headers;
        if (read_varlong(d->in, d->len, &pos, &length) < 0)
            FAIL("its length varint is truncated or too long", 0, 0);
        if (length < 1 || length > d->len - pos)
            FAIL("it claims %lld bytes but %lld follow", length, d->len - pos);
        Py_ssize_t end = pos + (Py_ssize_t)length;
        pos++; /* attributes: one byte, unused (Kafka's rule) */
        if (read_varlong(d->in, end, &pos, &ts_delta) < 0)
            FAIL("its timestamp delta is truncated", 0, 0);
        if (read_varlong(d->in, end, &pos, &offset_delta) < 0)
            FAIL("its offset delta is truncated", 0, 0);
        if (offset_delta < 0 || offset_delta > INT32_MAX)
            FAIL("its offset delta %lld is out of range", offset_delta, 0);
        d->deltas[i] = (int32_t)offset_delta;
        if (d->log_append) {
            d->ts[i] = d->max_ts;
        } else if (__builtin_add_overflow(d->first_ts, ts_delta, &d->ts[i])) {
            FAIL("its timestamp delta %lld overflows", ts_delta, 0);
        }
        if (take_bytes(d, i, end, &pos, d->kvalid, d->kdata, d->koffs, &kused, &d->knulls,
                       "its key length is %lld with %lld bytes left") < 0)
            return -1;
        if (take_bytes(d, i, end, &pos, d->vvalid, d->vdata, d->voffs, &vused, &d->vnulls,
                       "its value length is %lld with %lld bytes left") < 0)
            return -1;
        if (read_varlong(d->in, end, &pos, &headers) < 0 || headers < 0)
            FAIL("its header count is malformed", 0, 0);
        if (headers > 0)
            d->has_headers = 1;
        for (int64_t h = 0; h < headers; h++) {
            int64_t n;
            if (read_varlong(d->in, end, &pos, &n) < 0 || n < 0 || n > end - pos)
                FAIL("header %lld's key is malformed", h, 0);
            pos += n;
            if (read_varlong(d->in, end, &pos, &n) < 0 || n < -1 || n > end - pos)
                FAIL("header %lld's value is malformed", h, 0);
            if (n > 0)
                pos += n;
        }
        if (pos != end)
            FAIL("it claims %lld bytes but its fields take %lld", length,
                 length - (end - pos));
    }
    if (pos != d->len) {
        i = d->count - 1;
        FAIL("%lld bytes follow the last record", d->len - pos, 0);
    }
    return 0;
}

static PyObject *new_bytearray(Py_ssize_t n) {
    PyObject *b = PyByteArray_FromStringAndSize(NULL, n);
    if (b != NULL && n > 0)
        memset(PyByteArray_AS_STRING(b), 0, (size_t)n);
    return b;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t count;
    long long first_ts, max_ts;
    int log_append;
    if (!PyArg_ParseTuple(args, "y*nLLp", &buf, &count, &first_ts, &max_ts, &log_append))
        return NULL;
    PyObject *out = NULL, *kv = NULL, *ko = NULL, *kd = NULL, *vv = NULL, *vo = NULL,
             *vd = NULL, *ts = NULL, *dl = NULL;
    if (count < 1 || count > buf.len || buf.len > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%zd records in %zd bytes", count, buf.len);
        goto done;
    }
    Py_ssize_t bitmap = (count + 7) / 8;
    if (!(kv = new_bytearray(bitmap)) || !(vv = new_bytearray(bitmap)) ||
        !(ko = new_bytearray((count + 1) * 4)) || !(vo = new_bytearray((count + 1) * 4)) ||
        !(kd = new_bytearray(buf.len)) || !(vd = new_bytearray(buf.len)) ||
        !(ts = new_bytearray(count * 8)) || !(dl = new_bytearray(count * 4)))
        goto done;
    Decode d = {.in = buf.buf, .len = buf.len, .count = count, .first_ts = first_ts,
                .max_ts = max_ts, .log_append = log_append,
                .kvalid = (uint8_t *)PyByteArray_AS_STRING(kv),
                .vvalid = (uint8_t *)PyByteArray_AS_STRING(vv),
                .kdata = (uint8_t *)PyByteArray_AS_STRING(kd),
                .vdata = (uint8_t *)PyByteArray_AS_STRING(vd),
                .koffs = (int32_t *)PyByteArray_AS_STRING(ko),
                .voffs = (int32_t *)PyByteArray_AS_STRING(vo),
                .deltas = (int32_t *)PyByteArray_AS_STRING(dl),
                .ts = (int64_t *)PyByteArray_AS_STRING(ts)};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = decode_records(&d);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        char detail[160];
        PyOS_snprintf(detail, sizeof detail, d.fail.what, (long long)d.fail.a,
                      (long long)d.fail.b);
        PyErr_Format(PyExc_ValueError, "record %zd: %s", d.fail.record, detail);
        goto done;
    }
    if (PyByteArray_Resize(kd, d.koffs[count]) < 0 ||
        PyByteArray_Resize(vd, d.voffs[count]) < 0)
        goto done;
    out = Py_BuildValue("(OOOnOOOnOON)", d.knulls ? kv : Py_None, ko, kd, d.knulls,
                        d.vnulls ? vv : Py_None, vo, vd, d.vnulls, ts, dl,
                        PyBool_FromLong(d.has_headers));
done:
    Py_XDECREF(kv); Py_XDECREF(ko); Py_XDECREF(kd); Py_XDECREF(vv);
    Py_XDECREF(vo); Py_XDECREF(vd); Py_XDECREF(ts); Py_XDECREF(dl);
    PyBuffer_Release(&buf);
    return out;
}

/* One binary column as Arrow holds it, checked before the GIL is let go. */
typedef struct {
    const uint8_t *valid, *data;
    const int32_t *offs;
} Column;

static int check_column(Py_buffer *valid, Py_buffer *offs, Py_buffer *data,
                        Py_ssize_t off, Py_ssize_t n, const char *name, Column *c) {
    if (off < 0 || offs->len / 4 < off + n + 1 ||
        (valid->buf != NULL && valid->len * 8 < off + n)) {
        PyErr_Format(PyExc_ValueError, "the %s buffers hold fewer than %zd values", name, n);
        return -1;
    }
    c->valid = valid->buf;
    c->offs = (const int32_t *)offs->buf + off;
    c->data = data->buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (c->offs[i + 1] < c->offs[i] || c->offs[i] < 0) {
            PyErr_Format(PyExc_ValueError, "the %s offsets decrease at %zd", name, i);
            return -1;
        }
    }
    if (n && c->offs[n] > data->len) {
        PyErr_Format(PyExc_ValueError, "the %s offsets point past their data", name);
        return -1;
    }
    return 0;
}

static inline int is_null(const Column *c, Py_ssize_t bit) {
    return c->valid != NULL && !(c->valid[bit >> 3] & (1u << (bit & 7)));
}

static uint8_t *put_bytes(uint8_t *o, const Column *c, Py_ssize_t i, Py_ssize_t bit) {
    if (is_null(c, bit))
        return write_varint(o, -1);
    int32_t n = c->offs[i + 1] - c->offs[i];
    o = write_varint(o, n);
    memcpy(o, c->data + c->offs[i], (size_t)n);
    return o + n;
}

static Py_ssize_t encode_records(uint8_t *out, Py_ssize_t n, const Column *k, Py_ssize_t koff,
                                 const Column *v, Py_ssize_t voff, const int64_t *ts,
                                 int64_t first_ts, const int64_t *deltas) {
    uint8_t *o = out + HEADER_SIZE;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t tsd = (int64_t)((uint64_t)ts[i] - (uint64_t)first_ts);
        int64_t kn = is_null(k, koff + i) ? -1 : k->offs[i + 1] - k->offs[i];
        int64_t vn = is_null(v, voff + i) ? -1 : v->offs[i + 1] - v->offs[i];
        int64_t body = 1 + varint_size(tsd) + varint_size(deltas[i]) + varint_size(kn) +
                       (kn > 0 ? kn : 0) + varint_size(vn) + (vn > 0 ? vn : 0) + 1;
        o = write_varint(o, body);
        *o++ = 0; /* attributes */
        o = write_varint(o, tsd);
        o = write_varint(o, deltas[i]);
        o = put_bytes(o, k, i, koff + i);
        o = put_bytes(o, v, i, voff + i);
        *o++ = 0; /* no headers */
    }
    return o - out;
}

static PyObject *encode(PyObject *self, PyObject *args) {
    Py_ssize_t n, koff, voff;
    long long first_ts;
    Py_buffer kvalid = {0}, koffs = {0}, kdata = {0}, vvalid = {0}, voffs = {0},
              vdata = {0}, ts = {0}, deltas = {0};
    PyObject *kv_obj, *vv_obj, *out = NULL;
    if (!PyArg_ParseTuple(args, "nOy*y*nOy*y*ny*Ly*", &n, &kv_obj, &koffs, &kdata, &koff,
                          &vv_obj, &voffs, &vdata, &voff, &ts, &first_ts, &deltas))
        return NULL;
    if ((kv_obj != Py_None && PyObject_GetBuffer(kv_obj, &kvalid, PyBUF_SIMPLE) < 0) ||
        (vv_obj != Py_None && PyObject_GetBuffer(vv_obj, &vvalid, PyBUF_SIMPLE) < 0))
        goto done;
    Column k, v;
    if (n < 1 || ts.len / 8 < n || deltas.len / 8 < n) {
        PyErr_Format(PyExc_ValueError, "%zd records, timestamps or deltas missing", n);
        goto done;
    }
    if (check_column(&kvalid, &koffs, &kdata, koff, n, "key", &k) < 0 ||
        check_column(&vvalid, &voffs, &vdata, voff, n, "value", &v) < 0)
        goto done;
    /* 5 (length) + 1 + 10 + 10 + 5 + 5 + 1 bytes a record besides its key and value */
    Py_ssize_t cap = HEADER_SIZE + n * 37 + (k.offs[n] - k.offs[0]) + (v.offs[n] - v.offs[0]);
    if (!(out = new_bytearray(cap)))
        goto done;
    uint8_t *o = (uint8_t *)PyByteArray_AS_STRING(out);
    Py_ssize_t used;
    Py_BEGIN_ALLOW_THREADS
    used = encode_records(o, n, &k, koff, &v, voff, ts.buf, first_ts, deltas.buf);
    Py_END_ALLOW_THREADS
    if (PyByteArray_Resize(out, used) < 0)
        Py_CLEAR(out);
done:
    if (kvalid.obj) PyBuffer_Release(&kvalid);
    if (vvalid.obj) PyBuffer_Release(&vvalid);
    PyBuffer_Release(&koffs); PyBuffer_Release(&kdata); PyBuffer_Release(&voffs);
    PyBuffer_Release(&vdata); PyBuffer_Release(&ts); PyBuffer_Release(&deltas);
    return out;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "Kafka records -> Arrow buffers (see the source)."},
    {"encode", encode, METH_VARARGS, "Arrow buffers -> Kafka records (see the source)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_records_c",
    .m_doc = "Kafka records <-> Arrow buffers (see records_columns.py).", .m_size = -1,
    .m_methods = methods};

PyMODINIT_FUNC PyInit__records_c(void) { return PyModule_Create(&module); }
