"""A minimal ctypes wrapper over any library with NCCL's C API, the way vLLM's pynccl
calls NCCL: the library is opened by path with RTLD_LOCAL (so its symbols do not clash
with the NCCL that torch already loaded), and collectives take raw device pointers and
a CUDA stream.

    import torch.distributed as dist
    from pynccl import NcclLib, PyNcclComm

    torch.cuda.set_device(local_rank)          # the communicator binds the current device
    gloo = dist.new_group(backend="gloo")      # the unique id travels over gloo
    comm = PyNcclComm(NcclLib("/path/to/libnccl.so.2"), gloo)
    comm.all_reduce(t)                         # in place, on the current stream
    comm.all_gather(out, inp)
    comm.reduce_scatter(out, inp)
    comm.destroy()

Every call is checked; a failing call raises NcclError with the library's error string
(and ncclGetLastError's text where the library has it).
"""

import ctypes
import os

import torch
import torch.distributed as dist

# ncclDataType_t and ncclRedOp_t values from nccl.h
ncclInt32 = 2
ncclFloat16 = 6
ncclFloat32 = 7
ncclBfloat16 = 9
ncclSum = 0

TORCH_TO_NCCL = {
    torch.int32: ncclInt32,
    torch.float16: ncclFloat16,
    torch.float32: ncclFloat32,
    torch.bfloat16: ncclBfloat16,
}

ncclResult_t = ctypes.c_int
ncclComm_t = ctypes.c_void_p
cudaStream_t = ctypes.c_void_p


class NcclUniqueId(ctypes.Structure):
    """`typedef struct { char internal[128]; } ncclUniqueId;` (passed by value)."""

    _fields_ = [("internal", ctypes.c_byte * 128)]


class NcclError(RuntimeError):
    pass


# name -> (restype, argtypes); every one of these must be exported
_REQUIRED = {
    "ncclGetErrorString": (ctypes.c_char_p, [ncclResult_t]),
    "ncclGetUniqueId": (ncclResult_t, [ctypes.POINTER(NcclUniqueId)]),
    "ncclCommInitRank": (ncclResult_t, [ctypes.POINTER(ncclComm_t), ctypes.c_int, NcclUniqueId, ctypes.c_int]),
    "ncclAllReduce": (
        ncclResult_t,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ncclComm_t, cudaStream_t],
    ),
    "ncclAllGather": (
        ncclResult_t,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ncclComm_t, cudaStream_t],
    ),
    "ncclReduceScatter": (
        ncclResult_t,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ncclComm_t, cudaStream_t],
    ),
    "ncclCommDestroy": (ncclResult_t, [ncclComm_t]),
}

# looked up when present; their absence only costs detail in error messages
_OPTIONAL = {
    "ncclGetLastError": (ctypes.c_char_p, [ncclComm_t]),
    "ncclGetVersion": (ncclResult_t, [ctypes.POINTER(ctypes.c_int)]),
}


def _bind(handle, name, restype, argtypes):
    fn = getattr(handle, name)
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


def _load_cxx_runtime():
    """Load the system libstdc++ with RTLD_GLOBAL before any NCCL-API library.

    Opened RTLD_LOCAL into a process without a global C++ runtime, MSCCL++ 0.9's
    ncclGetUniqueId crashes (SIGSEGV in Socket::bind, in the libstdc++ iostream code
    inside libmscclpp.so); with the runtime loaded globally first it runs. commhal's
    own loader does the same (backends/cuda-coll/src/nccl_lib.rs, load_cxx_runtime).
    """
    try:
        ctypes.CDLL("libstdc++.so.6", mode=os.RTLD_GLOBAL)
    except OSError:
        pass  # no C++ runtime to share: a C library needs none


class NcclLib:
    """The NCCL C API of one shared library, opened by path with RTLD_LOCAL."""

    def __init__(self, path):
        self.path = path
        _load_cxx_runtime()
        self.handle = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
        self.fn = {}
        for name, (restype, argtypes) in _REQUIRED.items():
            try:
                self.fn[name] = _bind(self.handle, name, restype, argtypes)
            except AttributeError as e:
                raise NcclError(f"{path} does not export {name}") from e
        for name, (restype, argtypes) in _OPTIONAL.items():
            try:
                self.fn[name] = _bind(self.handle, name, restype, argtypes)
            except AttributeError:
                pass

    def error_string(self, rc):
        s = self.fn["ncclGetErrorString"](rc)
        return s.decode(errors="replace") if s else f"error {rc}"

    def last_error(self, comm):
        fn = self.fn.get("ncclGetLastError")
        if fn is None:
            return ""
        s = fn(comm)
        return s.decode(errors="replace") if s else ""

    def check(self, name, rc, comm=None):
        if rc != 0:
            msg = f"{name} failed: {self.error_string(rc)} (ncclResult_t {rc})"
            last = self.last_error(comm)
            if last:
                msg += f"; last error: {last}"
            raise NcclError(msg)

    def version(self):
        """ncclGetVersion's code (e.g. 22809 for 2.28.9), or None where not exported."""
        fn = self.fn.get("ncclGetVersion")
        if fn is None:
            return None
        v = ctypes.c_int()
        self.check("ncclGetVersion", fn(ctypes.byref(v)))
        return v.value

    def get_unique_id(self):
        uid = NcclUniqueId()
        self.check("ncclGetUniqueId", self.fn["ncclGetUniqueId"](ctypes.byref(uid)))
        return uid

    def comm_init_rank(self, nranks, uid, rank):
        comm = ncclComm_t()
        self.check("ncclCommInitRank", self.fn["ncclCommInitRank"](ctypes.byref(comm), nranks, uid, rank))
        return comm

    def all_reduce(self, send, recv, count, dtype, op, comm, stream):
        rc = self.fn["ncclAllReduce"](send, recv, count, dtype, op, comm, stream)
        self.check("ncclAllReduce", rc, comm)

    def all_gather(self, send, recv, sendcount, dtype, comm, stream):
        rc = self.fn["ncclAllGather"](send, recv, sendcount, dtype, comm, stream)
        self.check("ncclAllGather", rc, comm)

    def reduce_scatter(self, send, recv, recvcount, dtype, op, comm, stream):
        rc = self.fn["ncclReduceScatter"](send, recv, recvcount, dtype, op, comm, stream)
        self.check("ncclReduceScatter", rc, comm)

    def comm_destroy(self, comm):
        self.check("ncclCommDestroy", self.fn["ncclCommDestroy"](comm))


def _stream_handle(stream):
    if stream is None:
        stream = torch.cuda.current_stream()
    return cudaStream_t(stream.cuda_stream)


def _nccl_dtype(t):
    try:
        return TORCH_TO_NCCL[t.dtype]
    except KeyError:
        raise NcclError(f"dtype {t.dtype} has no NCCL mapping here") from None


def _check_tensor(t):
    if not t.is_cuda or not t.is_contiguous():
        raise NcclError("tensors must be contiguous CUDA tensors")


class PyNcclComm:
    """An NCCL communicator over the ranks of `group`, a gloo process group.

    Rank 0 of the group makes the unique id; its 128 bytes reach the other ranks by a
    broadcast on the gloo group, so the exchange never touches the library under test.
    Call torch.cuda.set_device first: the communicator binds the current device.
    """

    def __init__(self, lib, group):
        if dist.get_backend(group) != "gloo":
            raise NcclError("PyNcclComm exchanges the unique id over a gloo group")
        self.lib = lib
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        # The id's 128 bytes travel as a uint8 tensor: broadcast_object_list would do
        # as well but unpickles through numpy, which torch does not require.
        raw = torch.zeros(128, dtype=torch.uint8)
        if self.rank == 0:
            raw.copy_(torch.frombuffer(bytearray(bytes(lib.get_unique_id())), dtype=torch.uint8))
        # the global rank of the group's rank 0 (get_process_group_ranks lists them in
        # group-rank order and, unlike get_global_rank in older releases, accepts WORLD)
        dist.broadcast(raw, src=dist.get_process_group_ranks(group)[0], group=group)
        uid = NcclUniqueId.from_buffer_copy(bytes(raw.tolist()))
        self.comm = lib.comm_init_rank(self.world_size, uid, self.rank)

    def all_reduce(self, tensor, out=None, stream=None):
        """Sum `tensor` over the ranks into `out` (default: in place)."""
        out = tensor if out is None else out
        _check_tensor(tensor)
        _check_tensor(out)
        assert out.numel() == tensor.numel() and out.dtype == tensor.dtype
        self.lib.all_reduce(
            ctypes.c_void_p(tensor.data_ptr()),
            ctypes.c_void_p(out.data_ptr()),
            tensor.numel(),
            _nccl_dtype(tensor),
            ncclSum,
            self.comm,
            _stream_handle(stream),
        )
        return out

    def all_gather(self, out, inp, stream=None):
        """Concatenate every rank's `inp` into `out` (numel world_size * inp.numel())."""
        _check_tensor(out)
        _check_tensor(inp)
        assert out.numel() == inp.numel() * self.world_size and out.dtype == inp.dtype
        self.lib.all_gather(
            ctypes.c_void_p(inp.data_ptr()),
            ctypes.c_void_p(out.data_ptr()),
            inp.numel(),
            _nccl_dtype(inp),
            self.comm,
            _stream_handle(stream),
        )
        return out

    def reduce_scatter(self, out, inp, stream=None):
        """Sum `inp` over the ranks; rank r keeps block r in `out` (numel inp.numel() / world_size)."""
        _check_tensor(out)
        _check_tensor(inp)
        assert inp.numel() == out.numel() * self.world_size and out.dtype == inp.dtype
        self.lib.reduce_scatter(
            ctypes.c_void_p(inp.data_ptr()),
            ctypes.c_void_p(out.data_ptr()),
            out.numel(),
            _nccl_dtype(inp),
            ncclSum,
            self.comm,
            _stream_handle(stream),
        )
        return out

    def destroy(self):
        if self.comm is not None:
            comm, self.comm = self.comm, None
            self.lib.comm_destroy(comm)
