/* vpncrypt._oneshot: the Python API's one-message calls (seal, open, xseal,
 * xopen, chacha20_xor, and the AEAD / XAEAD key objects) as a CPython C-API
 * module, without cffi's per-call costs.
 *
 *  - METH_FASTCALL: arguments arrive as a C array; no tuple, no dict.
 *  - bytes arguments are read in place; any other object through the buffer
 *    protocol (bytearray, memoryview of any item size, counted in bytes, mmap,
 *    array, read-only or writable), never copied; a non-contiguous buffer is
 *    refused with BufferError.
 *  - The result is written straight into a new bytes object.
 *  - The GIL is kept for short messages (releasing and taking it back costs
 *    more than sealing a short packet) and released from GIL_RELEASE_BYTES on.
 *
 * No crypto code is linked here: the cffi module vpncrypt._native holds the
 * kernels and the one kernel selection, and vpncrypt.crypto hands this module
 * its table of entry points (vc_oneshot.h) at import through _bind(), so
 * vpncrypt.crypto.use_implementation() applies to these calls too.
 *
 * Error messages and types are those of vpncrypt/crypto/args.py (the pynacl
 * backend's checks), argument by argument in the same order. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "vc_oneshot.h"

/* Status codes of vpncrypt.h (not included: it is the cffi cdef). */
#define VC_OK            0
#define VC_ERR_AUTH     -1
#define VC_ERR_COUNTER  -2

/* From this many message bytes on, the GIL is released around the kernel.
 * Measured on the x86-64 bench machine (BENCHMARKS.md, issue 13): releasing and
 * re-taking it costs 10-45 ns per call, under 3% of a call from 4 KiB on, and
 * more than 10% of a short packet's. */
#ifndef GIL_RELEASE_BYTES
#define GIL_RELEASE_BYTES 4096
#endif

static const struct vc_oneshot_api *api;
static PyObject *auth_error;       /* vpncrypt.crypto.AuthenticationError */
static PyObject *counter_error;    /* vpncrypt.crypto.CounterOverflowError */

static void wipe(void *p, size_t n)
{
    memset(p, 0, n);
    __asm__ __volatile__("" : : "r"(p) : "memory");
}

static int not_bound(void)
{
    PyErr_SetString(PyExc_RuntimeError,
                    "vpncrypt._oneshot is not bound to the native core: import vpncrypt.crypto");
    return -1;
}

/* ---- arguments ---- */

/* A byte string argument: bytes in place, anything else as a buffer view. */
typedef struct {
    const uint8_t *p;
    Py_ssize_t n;
    int has_view;
    int writable;       /* another thread could change it while the GIL is released */
    Py_buffer view;
} bytes_arg;

static int get_bytes(PyObject *o, const char *name, bytes_arg *b)
{
    if (PyBytes_CheckExact(o)) {
        b->p = (const uint8_t *)PyBytes_AS_STRING(o);
        b->n = PyBytes_GET_SIZE(o);
        b->has_view = 0;
        b->writable = 0;
        return 0;
    }
    if (PyObject_GetBuffer(o, &b->view, PyBUF_SIMPLE) < 0) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "%s must be bytes, bytearray, memoryview or another bytes-like object, "
                         "not %.200s", name, Py_TYPE(o)->tp_name);
        } else if (PyErr_ExceptionMatches(PyExc_BufferError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_BufferError,
                         "%s must be a contiguous buffer (a strided memoryview is not)", name);
        }
        return -1;
    }
    b->p = b->view.buf;
    b->n = b->view.len;
    b->has_view = 1;
    b->writable = !b->view.readonly;
    return 0;
}

static void put_bytes(bytes_arg *b)
{
    if (b->has_view) {
        PyBuffer_Release(&b->view);
        b->has_view = 0;
    }
}

static int get_sized(PyObject *o, const char *name, Py_ssize_t size, bytes_arg *b)
{
    if (get_bytes(o, name, b) < 0)
        return -1;
    if (b->n != size) {
        PyErr_Format(PyExc_ValueError, "%s must be %zd bytes long, got %zd", name, size, b->n);
        put_bytes(b);
        return -1;
    }
    return 0;
}

/* Python's own argument errors, for the fast-call signature
 * fname(names[0], ..., names[nmax - 1]) of which the first nreq are required.
 * Fills out[0..nmax) (NULL: not given). */
static int parse_args(const char *fname, const char *const *names, int nreq, int nmax,
                      PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **out)
{
    if (nargs > nmax) {
        PyErr_Format(PyExc_TypeError, "%s() takes from %d to %d positional arguments but %zd were given",
                     fname, nreq, nmax, nargs);
        return -1;
    }
    for (int i = 0; i < nmax; i++)
        out[i] = i < nargs ? args[i] : NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, k);
        int at = -1;
        for (int i = 0; i < nmax && at < 0; i++)
            if (PyUnicode_CompareWithASCIIString(kw, names[i]) == 0)
                at = i;
        if (at < 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname, kw);
            return -1;
        }
        if (out[at]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname, names[at]);
            return -1;
        }
        out[at] = args[nargs + k];
    }
    for (int i = 0; i < nreq; i++) {
        if (!out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument: '%s'", fname, names[i]);
            return -1;
        }
    }
    return 0;
}

/* An int in [low, high): args.integer()'s checks and messages. */
static int get_int(PyObject *o, const char *name, long long low, long long high, long long *v)
{
    if (!PyLong_Check(o) || PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.200s", name, Py_TYPE(o)->tp_name);
        return -1;
    }
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow || x < low || x >= high) {
        PyErr_Format(PyExc_ValueError, "%s must be in [%lld, %lld), got %R", name, low, high, o);
        return -1;
    }
    *v = x;
    return 0;
}

/* ---- the AEAD calls ---- */

typedef int (*seal_fn)(uint8_t *out, const uint8_t *pt, size_t len, const uint8_t *aad,
                       size_t aad_len, const uint8_t *key, const uint8_t *nonce);

enum { SEAL, OPEN };

/* key: 32 bytes, already checked (a key object) or NULL: take it from key_obj. */
static PyObject *aead_call(int op, int xchacha, const uint8_t *key, PyObject *key_obj,
                           PyObject *nonce_obj, PyObject *data_obj, PyObject *aad_obj)
{
    if (!api && not_bound() < 0)
        return NULL;
    Py_ssize_t nonce_len = xchacha ? 24 : 12;
    const char *data_name = op == SEAL ? "plaintext" : "sealed";
    bytes_arg k = {0}, n = {0}, d = {0}, a = {0};
    PyObject *out = NULL;
    if (!key) {
        if (get_sized(key_obj, "key", 32, &k) < 0)
            return NULL;
        key = k.p;
    }
    if (get_sized(nonce_obj, "nonce", nonce_len, &n) < 0)
        goto done;
    if (get_bytes(data_obj, data_name, &d) < 0)
        goto done;
    if (op == OPEN && d.n < 16) {
        PyErr_Format(PyExc_ValueError, "sealed must be at least 16 bytes (the tag), got %zd", d.n);
        goto done;
    }
    if (aad_obj) {
        if (get_bytes(aad_obj, "aad", &a) < 0)
            goto done;
    } else {
        a.p = (const uint8_t *)"";
        a.n = 0;
    }
    if (op == SEAL && d.n > PY_SSIZE_T_MAX - 16) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t out_len = op == SEAL ? d.n + 16 : d.n - 16;
    out = PyBytes_FromStringAndSize(NULL, out_len);
    if (!out)
        goto done;
    seal_fn f = op == SEAL ? (xchacha ? api->xseal : api->seal) : (xchacha ? api->xopen : api->open);
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    int rc;
    /* A buffer another thread could change is read under the GIL: opening
     * reads the ciphertext twice (MAC, then decryption). */
    int unlock = d.n >= GIL_RELEASE_BYTES && !(op == OPEN && (d.writable || a.writable));
    if (unlock) {
        Py_BEGIN_ALLOW_THREADS
        rc = f(o, d.p, (size_t)d.n, a.p, (size_t)a.n, key, n.p);
        Py_END_ALLOW_THREADS
    } else {
        rc = f(o, d.p, (size_t)d.n, a.p, (size_t)a.n, key, n.p);
    }
    if (rc != VC_OK) {
        Py_CLEAR(out);
        if (op == OPEN)
            PyErr_SetString(auth_error, "message failed to authenticate");
        else
            PyErr_Format(PyExc_ValueError, "plaintext is too long for one message (%zd bytes)", d.n);
    }
done:
    put_bytes(&k);
    put_bytes(&n);
    put_bytes(&d);
    put_bytes(&a);
    return out;
}

static const char *const seal_names[] = {"key", "nonce", "plaintext", "aad"};
static const char *const open_names[] = {"key", "nonce", "sealed", "aad"};

static PyObject *module_aead(int op, int xchacha, const char *fname, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    if (!kwnames && (nargs == 3 || nargs == 4))
        return aead_call(op, xchacha, NULL, args[0], args[1], args[2], nargs == 4 ? args[3] : NULL);
    PyObject *a[4];
    if (parse_args(fname, op == SEAL ? seal_names : open_names, 3, 4, args, nargs, kwnames, a) < 0)
        return NULL;
    return aead_call(op, xchacha, NULL, a[0], a[1], a[2], a[3]);
}

static PyObject *py_seal(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return module_aead(SEAL, 0, "seal", args, nargs, kw);
}

static PyObject *py_open(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return module_aead(OPEN, 0, "open", args, nargs, kw);
}

static PyObject *py_xseal(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return module_aead(SEAL, 1, "xseal", args, nargs, kw);
}

static PyObject *py_xopen(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return module_aead(OPEN, 1, "xopen", args, nargs, kw);
}

/* ---- chacha20_xor(key, nonce, data, counter=0, rounds=20) ---- */

static const char *const xor_names[] = {"key", "nonce", "data", "counter", "rounds"};

static PyObject *py_chacha20_xor(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    if (!api && not_bound() < 0)
        return NULL;
    PyObject *a[5];
    if (parse_args("chacha20_xor", xor_names, 3, 5, args, nargs, kwnames, a) < 0)
        return NULL;
    bytes_arg k = {0}, n = {0}, d = {0};
    PyObject *out = NULL;
    long long counter = 0, rounds = 20;
    if (get_sized(a[0], "key", 32, &k) < 0 || get_sized(a[1], "nonce", 12, &n) < 0 ||
        get_bytes(a[2], "data", &d) < 0)
        goto done;
    if (a[3] && get_int(a[3], "counter", 0, 1LL << 32, &counter) < 0)
        goto done;
    if (a[4]) {
        if (!PyLong_Check(a[4]) || PyBool_Check(a[4])) {
            PyErr_Format(PyExc_TypeError, "rounds must be an int, not %.200s", Py_TYPE(a[4])->tp_name);
            goto done;
        }
        int overflow;
        rounds = PyLong_AsLongLongAndOverflow(a[4], &overflow);
        if (rounds == -1 && PyErr_Occurred())
            goto done;
        if (overflow || (rounds != 8 && rounds != 12 && rounds != 20)) {
            PyErr_Format(PyExc_ValueError, "rounds must be 8, 12 or 20, got %R", a[4]);
            goto done;
        }
    }
    out = PyBytes_FromStringAndSize(NULL, d.n);
    if (!out)
        goto done;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    int rc;
    if (d.n >= GIL_RELEASE_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        rc = api->chacha20_xor(o, d.p, (size_t)d.n, k.p, n.p, (uint32_t)counter, (int)rounds);
        Py_END_ALLOW_THREADS
    } else {
        rc = api->chacha20_xor(o, d.p, (size_t)d.n, k.p, n.p, (uint32_t)counter, (int)rounds);
    }
    if (rc != VC_OK) {
        Py_CLEAR(out);
        if (rc == VC_ERR_COUNTER)
            PyErr_Format(counter_error, "%zd bytes from block counter %lld would wrap the 32-bit "
                         "block counter", d.n, counter);
        else
            PyErr_Format(PyExc_ValueError, "chacha20_xor failed (status %d)", rc);
    }
done:
    put_bytes(&k);
    put_bytes(&n);
    put_bytes(&d);
    return out;
}

/* ---- key objects: AEAD(key), XAEAD(key) ---- */

typedef struct {
    PyObject_HEAD
    uint8_t key[32];
} key_object;

static PyTypeObject aead_type, xaead_type;

static PyObject *key_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *key_obj = NULL;
    Py_ssize_t nargs = PyTuple_GET_SIZE(args), nkw = kwds ? PyDict_GET_SIZE(kwds) : 0;
    if (nargs == 1 && nkw == 0)
        key_obj = PyTuple_GET_ITEM(args, 0);
    else if (nargs == 0 && nkw == 1)
        key_obj = PyDict_GetItemString(kwds, "key");
    if (!key_obj) {
        PyErr_Format(PyExc_TypeError, "%s() takes exactly one argument: key", type->tp_name);
        return NULL;
    }
    bytes_arg k;
    if (get_sized(key_obj, "key", 32, &k) < 0)
        return NULL;
    key_object *self = (key_object *)type->tp_alloc(type, 0);
    if (self)
        memcpy(self->key, k.p, 32);
    put_bytes(&k);
    return (PyObject *)self;
}

static void key_dealloc(PyObject *o)
{
    key_object *self = (key_object *)o;
    wipe(self->key, sizeof self->key);
    Py_TYPE(o)->tp_free(o);
}

static const char *const key_seal_names[] = {"nonce", "plaintext", "aad"};
static const char *const key_open_names[] = {"nonce", "sealed", "aad"};

static PyObject *key_aead(PyObject *o, int op, const char *fname, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    key_object *self = (key_object *)o;
    int x = Py_IS_TYPE(o, &xaead_type);
    if (!kwnames && (nargs == 2 || nargs == 3))
        return aead_call(op, x, self->key, NULL, args[0], args[1], nargs == 3 ? args[2] : NULL);
    PyObject *a[3];
    if (parse_args(fname, op == SEAL ? key_seal_names : key_open_names, 2, 3, args, nargs,
                   kwnames, a) < 0)
        return NULL;
    return aead_call(op, x, self->key, NULL, a[0], a[1], a[2]);
}

static PyObject *key_seal(PyObject *o, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return key_aead(o, SEAL, "seal", args, nargs, kw);
}

static PyObject *key_open(PyObject *o, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return key_aead(o, OPEN, "open", args, nargs, kw);
}

static PyObject *key_repr(PyObject *o)
{
    return PyUnicode_FromFormat("<%s (key hidden)>", Py_TYPE(o)->tp_name);
}

static PyObject *key_reduce(PyObject *o, PyObject *Py_UNUSED(unused))
{
    PyErr_Format(PyExc_TypeError, "cannot pickle or copy a %s: it holds a secret key",
                 Py_TYPE(o)->tp_name);
    return NULL;
}

static PyMethodDef key_methods[] = {
    {"seal", (PyCFunction)(void (*)(void))key_seal, METH_FASTCALL | METH_KEYWORDS,
     "seal(nonce, plaintext, aad=b'') -> ciphertext || 16-byte tag"},
    {"open", (PyCFunction)(void (*)(void))key_open, METH_FASTCALL | METH_KEYWORDS,
     "open(nonce, sealed, aad=b'') -> plaintext; raises AuthenticationError on a bad tag"},
    {"__reduce__", key_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

/* The two key types: the same object and methods (key_aead tells the algorithm
 * by the type), each with its name and docstring. */
#define KEY_TYPE(NAME, DOC)                                                     \
    {                                                                           \
        PyVarObject_HEAD_INIT(NULL, 0)                                          \
        .tp_name = NAME,                                                        \
        .tp_basicsize = sizeof(key_object),                                     \
        .tp_flags = Py_TPFLAGS_DEFAULT,                                         \
        .tp_doc = DOC,                                                          \
        .tp_new = key_new,                                                      \
        .tp_dealloc = key_dealloc,                                              \
        .tp_repr = key_repr,                                                    \
        .tp_methods = key_methods,                                              \
    }

static PyTypeObject aead_type = KEY_TYPE(
    "vpncrypt.crypto.AEAD",
    "AEAD(key): ChaCha20-Poly1305 (RFC 8439) under one 32-byte key.\n\n"
    "seal(nonce, plaintext, aad=b'') and open(nonce, sealed, aad=b'') take a 12-byte\n"
    "nonce and raise the errors of vpncrypt.crypto.seal / open.  The key is copied\n"
    "into the object and wiped when the object is freed.");

static PyTypeObject xaead_type = KEY_TYPE(
    "vpncrypt.crypto.XAEAD",
    "XAEAD(key): XChaCha20-Poly1305 (draft-irtf-cfrg-xchacha) under one 32-byte key.\n\n"
    "seal(nonce, plaintext, aad=b'') and open(nonce, sealed, aad=b'') take a 24-byte\n"
    "nonce and raise the errors of vpncrypt.crypto.xseal / xopen.");

/* ---- binding ---- */

static PyObject *py_bind(PyObject *Py_UNUSED(m), PyObject *args)
{
    unsigned long long address;
    PyObject *auth, *counter;
    if (!PyArg_ParseTuple(args, "KOO:_bind", &address, &auth, &counter))
        return NULL;
    const struct vc_oneshot_api *t = (const struct vc_oneshot_api *)(uintptr_t)address;
    if (!t) {
        PyErr_SetString(PyExc_ValueError, "_bind: NULL table");
        return NULL;
    }
    if (t->abi != VC_ONESHOT_ABI || t->size != sizeof *t) {
        PyErr_Format(PyExc_ImportError, "vpncrypt._oneshot (ABI %d) does not match vpncrypt._native "
                     "(ABI %u): rebuild the package", VC_ONESHOT_ABI, (unsigned)t->abi);
        return NULL;
    }
    if (!PyType_Check(auth) || !PyType_Check(counter)) {
        PyErr_SetString(PyExc_TypeError, "_bind: the error classes must be types");
        return NULL;
    }
    Py_INCREF(auth);
    Py_INCREF(counter);
    Py_XSETREF(auth_error, auth);
    Py_XSETREF(counter_error, counter);
    api = t;
    Py_RETURN_NONE;
}

static PyObject *py_gil_threshold(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(unused))
{
    return PyLong_FromLong(GIL_RELEASE_BYTES);
}

static PyMethodDef methods[] = {
    {"seal", (PyCFunction)(void (*)(void))py_seal, METH_FASTCALL | METH_KEYWORDS,
     "seal(key, nonce, plaintext, aad=b'') -> bytes\n\n"
     "ChaCha20-Poly1305 (RFC 8439): the ciphertext followed by the 16-byte tag."},
    {"open", (PyCFunction)(void (*)(void))py_open, METH_FASTCALL | METH_KEYWORDS,
     "open(key, nonce, sealed, aad=b'') -> bytes\n\n"
     "Open ciphertext || tag; raises AuthenticationError on a bad tag."},
    {"xseal", (PyCFunction)(void (*)(void))py_xseal, METH_FASTCALL | METH_KEYWORDS,
     "xseal(key, nonce, plaintext, aad=b'') -> bytes\n\n"
     "XChaCha20-Poly1305 (draft-irtf-cfrg-xchacha): 24-byte nonce."},
    {"xopen", (PyCFunction)(void (*)(void))py_xopen, METH_FASTCALL | METH_KEYWORDS,
     "xopen(key, nonce, sealed, aad=b'') -> bytes\n\n"
     "Open an XChaCha20-Poly1305 message; raises AuthenticationError on a bad tag."},
    {"chacha20_xor", (PyCFunction)(void (*)(void))py_chacha20_xor, METH_FASTCALL | METH_KEYWORDS,
     "chacha20_xor(key, nonce, data, counter=0, rounds=20) -> bytes\n\n"
     "XOR the ChaCha keystream (RFC 8439 layout, 32-bit block counter) into data;\n"
     "raises CounterOverflowError if the message would wrap the block counter."},
    {"_bind", py_bind, METH_VARARGS,
     "_bind(table_address, AuthenticationError, CounterOverflowError): done by vpncrypt.crypto."},
    {"gil_release_bytes", py_gil_threshold, METH_NOARGS,
     "The message size from which a call releases the GIL."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "vpncrypt._oneshot",
    "One-message ChaCha20-Poly1305 calls for vpncrypt.crypto (see native/pyext/oneshot.c).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__oneshot(void)
{
    if (PyType_Ready(&aead_type) < 0 || PyType_Ready(&xaead_type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&aead_type);
    Py_INCREF(&xaead_type);
    if (PyModule_AddObject(m, "AEAD", (PyObject *)&aead_type) < 0 ||
        PyModule_AddObject(m, "XAEAD", (PyObject *)&xaead_type) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
