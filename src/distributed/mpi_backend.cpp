// The MPI world and backend: ranks from MPI_COMM_WORLD (a duplicate, so that ember's messages
// never meet the program's own), CPU collectives as MPI's non-blocking collectives (the front
// end polls them with its timeout), float16/bfloat16 reductions through a float32 buffer.
#include <mpi.h>

#include <climits>

#include "distributed/backend.h"
#include "ember/autograd.h"
#include "ember/ops.h"

namespace ember::distributed {

bool built_with_mpi() { return true; }

namespace {

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  EMBER_FAIL("distributed: ", call, " failed on rank ", r, ": ", std::string(msg, size_t(len)));
}

// The MPI type reductions use (16-bit floats are reduced as float32, see reduced_buffer).
MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::Int32: return MPI_INT32_T;
    case DType::Int64: return MPI_INT64_T;
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    default: break;
  }
  EMBER_FAIL("distributed: internal: no MPI reduction type for ", dtype_name(t));
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;  // then divided by the world size
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_SUM;
}

int int_count(int64_t n, const char* op) {
  EMBER_CHECK(n <= INT_MAX, "distributed ", op, ": ", n, " elements exceed MPI's count limit ",
              INT_MAX, "; split the tensor");
  return int(n);
}

// Requests in flight and what to do once they all completed.
struct MpiOp : PendingOp {
  std::vector<MPI_Request> requests;
  std::function<void()> then;
  bool test() override {
    int done = 0;
    check_mpi(MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
              "MPI_Testall");
    return done != 0;
  }
  void finish() override {
    if (then) then();
  }
};

// The tensor MPI reduces for t: t itself, or a float32 copy for 16-bit floats; `then` divides
// for Avg and rounds a copy back into t.
Tensor reduced_buffer(const Tensor& t, ReduceOp op, int world, const Tensor& result, MpiOp& m) {
  NoGradGuard no_grad;
  Tensor buf = is_16bit_float(t.dtype()) ? t.to(DType::Float32) : t;
  m.then = [buf, result, op, world] {
    NoGradGuard no_grad;
    Tensor b = buf;
    if (op == ReduceOp::Avg) b.div_(scalar_tensor(double(world), b.dtype()));
    if (b.impl() != result.impl()) Tensor(result).copy_(b);
  };
  return buf;
}

class MpiBackend : public Backend {
 public:
  MpiBackend(MPI_Comm comm, int size) : comm_(comm), size_(size) {}
  std::string_view name() const override { return "mpi"; }

  std::unique_ptr<PendingOp> all_reduce(const Tensor& t, ReduceOp op) override {
    auto m = std::make_unique<MpiOp>();
    Tensor buf = reduced_buffer(t, op, size_, t, *m);
    // In chunks of at most INT_MAX elements (MPI's counts are int).
    char* p = static_cast<char*>(buf.data_ptr());
    const size_t esize = dtype_size(buf.dtype());
    for (int64_t done = 0, n = buf.numel(); done < n;) {
      const int count = int(std::min<int64_t>(n - done, INT_MAX));
      m->requests.emplace_back();
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, p + done * esize, count, mpi_type(buf.dtype()),
                               mpi_op(op), comm_, &m->requests.back()),
                "MPI_Iallreduce");
      done += count;
    }
    return m;
  }

  std::unique_ptr<PendingOp> broadcast(const Tensor& t, int root) override {
    auto m = std::make_unique<MpiOp>();
    char* p = static_cast<char*>(t.data_ptr());
    const int64_t nbytes = t.numel() * int64_t(dtype_size(t.dtype()));
    for (int64_t done = 0; done < nbytes;) {
      const int count = int(std::min<int64_t>(nbytes - done, INT_MAX));
      m->requests.emplace_back();
      check_mpi(MPI_Ibcast(p + done, count, MPI_BYTE, root, comm_, &m->requests.back()),
                "MPI_Ibcast");
      done += count;
    }
    return m;
  }

  std::unique_ptr<PendingOp> all_gather(const Tensor& in, const Tensor& out) override {
    auto m = std::make_unique<MpiOp>();
    const int n = int_count(in.numel() * int64_t(dtype_size(in.dtype())), "all_gather");
    m->requests.emplace_back();
    check_mpi(MPI_Iallgather(in.data_ptr(), n, MPI_BYTE, out.data_ptr(), n, MPI_BYTE, comm_,
                             &m->requests.back()),
              "MPI_Iallgather");
    return m;
  }

  std::unique_ptr<PendingOp> reduce_scatter(const Tensor& in, const Tensor& out,
                                            ReduceOp op) override {
    auto m = std::make_unique<MpiOp>();
    NoGradGuard no_grad;
    Tensor src = is_16bit_float(in.dtype()) ? in.to(DType::Float32) : in;
    Tensor dst = reduced_buffer(out, op, size_, out, *m);
    auto then = std::move(m->then);
    m->then = [src, then] { then(); };  // keeps the converted input alive until the op is done
    m->requests.emplace_back();
    check_mpi(MPI_Ireduce_scatter_block(src.data_ptr(), dst.data_ptr(),
                                        int_count(dst.numel(), "reduce_scatter"),
                                        mpi_type(dst.dtype()), mpi_op(op), comm_,
                                        &m->requests.back()),
              "MPI_Ireduce_scatter_block");
    return m;
  }

  std::unique_ptr<PendingOp> barrier() override {
    auto m = std::make_unique<MpiOp>();
    m->requests.emplace_back();
    check_mpi(MPI_Ibarrier(comm_, &m->requests.back()), "MPI_Ibarrier");
    return m;
  }

 private:
  MPI_Comm comm_;
  int size_;
};

class MpiWorld : public World {
 public:
  MpiWorld() {
    int started = 0;
    check_mpi(MPI_Initialized(&started), "MPI_Initialized");
    if (!started) {
      // Collectives may be called from any thread, one at a time (the front end's lock).
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided),
                "MPI_Init_thread");
      owns_mpi_ = true;
    }
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    MPI_Comm host;
    check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &host),
              "MPI_Comm_split_type");
    check_mpi(MPI_Comm_rank(host, &local_rank_), "MPI_Comm_rank");
    MPI_Comm_free(&host);
    backend_ = std::make_unique<MpiBackend>(comm_, size_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  Backend& cpu_backend() override { return *backend_; }

  std::unique_ptr<PendingOp> exchange(const CallHeader& mine,
                                      std::vector<CallHeader>& all) override {
    struct Exchange : MpiOp {
      CallHeader sent;
    };
    auto m = std::make_unique<Exchange>();
    m->sent = mine;
    m->requests.emplace_back();
    check_mpi(MPI_Iallgather(&m->sent, int(sizeof(CallHeader)), MPI_BYTE, all.data(),
                             int(sizeof(CallHeader)), MPI_BYTE, comm_, &m->requests.back()),
              "MPI_Iallgather");
    return m;
  }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::abort();
  }

  bool usable() const override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    return !finalized;
  }

  void finalize() override {
    backend_.reset();
    if (!usable()) return;  // the program finalized MPI itself
    MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  bool owns_mpi_ = false;
  std::unique_ptr<MpiBackend> backend_;
};

}  // namespace

std::unique_ptr<World> make_mpi_world() { return std::make_unique<MpiWorld>(); }

}  // namespace ember::distributed
