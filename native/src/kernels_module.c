/* The one binding file: a thin CPython surface over the C kernels (hnswlib's bindings.cpp pattern).
 * Kernels take raw addresses or buffers so that llama.cpp's own memory is read without a copy. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include "surprise.h"

static int get_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize, Py_ssize_t n, const char *name)
{
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (view->len != itemsize * n) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd bytes, got %zd", name, itemsize * n, view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(surprise_doc,
"surprise(logits_address, n_rows, n_vocab, targets, out)\n\n"
"Write -log softmax(logits[r])[targets[r]] into out[r] (float32) for each row r.\n"
"logits_address is the integer address of a row-major float32 [n_rows, n_vocab] block\n"
"(e.g. llama_get_logits); targets is an int32 buffer of n_rows ids. Releases the GIL.");

static PyObject *py_surprise(PyObject *self, PyObject *args)
{
    unsigned long long address;
    Py_ssize_t n_rows, n_vocab;
    PyObject *targets_obj, *out_obj;
    (void)self;
    if (!PyArg_ParseTuple(args, "KnnOO", &address, &n_rows, &n_vocab, &targets_obj, &out_obj)) return NULL;
    if (address == 0 || n_rows < 0 || n_vocab <= 0) {
        PyErr_SetString(PyExc_ValueError, "surprise: null logits address or bad shape");
        return NULL;
    }
    Py_buffer targets, out;
    if (get_buffer(targets_obj, &targets, 0, 4, n_rows, "targets") < 0) return NULL;
    if (get_buffer(out_obj, &out, 1, 4, n_rows, "out") < 0) { PyBuffer_Release(&targets); return NULL; }
    const float *logits = (const float *)(uintptr_t)address;
    Py_BEGIN_ALLOW_THREADS
    epi_surprise_rows(logits, n_rows, n_vocab, (const int32_t *)targets.buf, (float *)out.buf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&targets);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"surprise", py_surprise, METH_VARARGS, surprise_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", "epi native kernels", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
