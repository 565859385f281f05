// ember::distributed's front end: the process group's state, init and finalize, and the
// collectives: arguments checked here, headers compared across ranks, each call waited for with
// the group's timeout, then handed to the backend of the tensor's device.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "distributed/backend.h"
#include "ember/autograd.h"
#include "ember/ops.h"

namespace ember::distributed {

std::string_view collective_name(Collective c) {
  switch (c) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::Broadcast: return "broadcast";
    case Collective::AllGather: return "all_gather";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::Barrier: return "barrier";
    case Collective::Finalize: return "finalize";
  }
  return "?";
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

namespace {

struct State {
  std::unique_ptr<World> world;
  InitOptions opts;
  int local_rank = 0;
  int64_t seq = 0;            // collectives called so far (the next one's number)
  std::string broken;         // set by a timeout: the group cannot be used after it
  std::recursive_mutex mutex;  // one collective at a time (hooks may run on other threads)
  // Work that timed out: its buffers stay alive, as the library may still write them.
  std::vector<std::shared_ptr<Work::Impl>> abandoned;
  std::terminate_handler prev_terminate = nullptr;  // restored by finalize()
  std::map<int, std::unique_ptr<Backend>> cuda;      // by device index
};

// Never destroyed: the terminate handler and the exit hook may run after static destructors.
State& state() {
  static State* s = new State();
  return *s;
}

// The number in environment variable `name`, if set (Error when it is not a number).
std::optional<double> env_number(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  EMBER_CHECK(end && *end == '\0', "distributed init: ", name, "=", v, " is not a number");
  return d;
}

std::string where(std::string_view op, int64_t seq) {
  return detail::cat_str("distributed ", op, " (collective #", seq, ") on rank ",
                         state().world->rank(), " of ", state().world->size());
}

State& require_init(std::string_view op) {
  State& s = state();
  EMBER_CHECK(s.world, "distributed ", op, ": the process group is not initialized; call "
              "ember::distributed::init() first (and launch with mpirun -np N)");
  EMBER_CHECK(s.broken.empty(), "distributed ", op, " on rank ", s.world->rank(),
              ": the process group is unusable after an earlier error (", s.broken,
              "); end the process");
  return s;
}

// Polls `op` until it completes; after the group's timeout, marks the group broken and raises.
void wait_for(PendingOp& op, const std::string& what) {
  State& s = state();
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int polls = 0;
  while (!op.test()) {
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (s.opts.timeout_s > 0 && waited > s.opts.timeout_s) {
      s.broken = what + " timed out";
      EMBER_FAIL(what, ": timed out after ", s.opts.timeout_s,
                 " s waiting for the other ranks (one may have stopped, thrown, or be calling "
                 "other collectives); the group cannot be used any more. Set "
                 "InitOptions::timeout_s or EMBER_DIST_TIMEOUT for longer waits");
    }
    // Poll tightly at first (collectives between processes on one host take microseconds),
    // then back off so that a long wait leaves the cores to the ranks doing work.
    if (++polls > 64) std::this_thread::sleep_for(std::chrono::microseconds(std::min(polls, 200)));
  }
}

std::string describe(const CallHeader& h) {
  std::string out(collective_name(Collective(h.op)));
  if (Collective(h.op) == Collective::Barrier) return out;
  if (Collective(h.op) == Collective::Finalize)
    return out + " (it is leaving the group: finalize(), or the end of the program)";
  if (h.reduce >= 0) out += detail::cat_str("(", reduce_op_name(ReduceOp(h.reduce)), ")");
  if (h.root >= 0) out += detail::cat_str("(root ", h.root, ")");
  out += detail::cat_str(" of a ", DeviceType(h.device) == DeviceType::CPU ? "cpu " : "cuda ",
                         dtype_name(DType(h.dtype)), " tensor [");
  for (int64_t d = 0; d < h.ndim; ++d) {
    if (d == CallHeader::kMaxDims) {
      out += detail::cat_str(", ... (", h.numel, " elements)");
      break;
    }
    out += detail::cat_str(d ? ", " : "", h.sizes[d]);
  }
  return out + "]";
}

// Takes the next call number, and when checks are on, compares this call with every rank's.
int64_t check_call(Collective c, const Tensor* t, int reduce, int root) {
  State& s = state();
  CallHeader h;
  h.seq = s.seq++;
  h.op = int64_t(c);
  h.reduce = reduce;
  h.root = root;
  if (t) {
    h.dtype = int64_t(t->dtype());
    h.device = int64_t(t->device().type);
    h.ndim = t->dim();
    h.numel = t->numel();
    for (int64_t d = 0; d < std::min<int64_t>(h.ndim, CallHeader::kMaxDims); ++d)
      h.sizes[d] = t->size(d);
  }
  if (!s.opts.check_calls) return h.seq;
  std::vector<CallHeader> all(size_t(s.world->size()));
  const std::string what = where(collective_name(c), h.seq);
  auto op = s.world->exchange(h, all);
  wait_for(*op, what + " (comparing the ranks' calls)");
  std::string diff;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] == h) continue;
    diff += detail::cat_str("; rank ", r, " called ", describe(all[r]));
    if (all[r].seq != h.seq)
      diff += detail::cat_str(" as its collective #", all[r].seq);
  }
  EMBER_CHECK(diff.empty(), what, ": the ranks' calls differ: this rank called ", describe(h),
              diff, ". Every rank must call the same collectives in the same order, with "
              "tensors of the same dtype and shape");
  return h.seq;
}

void broadcast_bytes(void* bytes, size_t n);

// The backend of t's device: MPI for the CPU; for a CUDA device, its NCCL communicator, made by
// the first collective on that device (every rank makes it in the same call).
Backend& backend_for(const Tensor& t) {
  State& s = state();
  if (t.device().type == DeviceType::CPU) return s.world->cpu_backend();
  std::unique_ptr<Backend>& b = s.cuda[t.device().index];
  if (!b) b = make_nccl_backend(t.device().index, s.world->rank(), s.world->size(), broadcast_bytes);
  return *b;
}

void check_tensor(const Tensor& t, std::string_view op, bool reduces, ReduceOp rop) {
  EMBER_CHECK(t.defined(), "distributed ", op, " on rank ", rank(), ": the tensor is undefined");
  EMBER_CHECK(!t.is_symbolic(), "distributed ", op, " on rank ", rank(),
              ": the tensor is a capture placeholder without data");
  if (!reduces) return;
  EMBER_CHECK(t.dtype() != DType::Bool, "distributed ", op, "(", reduce_op_name(rop), ") on rank ",
              rank(), ": bool tensors cannot be reduced; convert to int32 first");
  EMBER_CHECK(rop != ReduceOp::Avg || is_floating(t.dtype()), "distributed ", op,
              "(avg) on rank ", rank(), ": ", dtype_name(t.dtype()),
              " cannot be averaged; use a floating dtype, or sum and divide");
}

[[noreturn]] void on_terminate() {
  State& s = state();
  std::string what = "std::terminate was called without an active exception";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = std::string("uncaught exception: ") + ex.what();
    } catch (...) {
      what = "uncaught exception of a type not derived from std::exception";
    }
  }
  const int r = s.world ? s.world->rank() : -1, n = s.world ? s.world->size() : 0;
  std::fprintf(stderr, "ember.distributed: rank %d of %d: %s\n"
               "ember.distributed: rank %d ends every rank of the job (MPI_Abort)\n",
               r, n, what.c_str(), r);
  std::fflush(stderr);
  if (s.world) s.world->abort(1);
  std::abort();
}

void finalize_at_exit() {
  if (state().world) finalize();
}

}  // namespace

struct Work::Impl {
  std::string what;
  std::unique_ptr<PendingOp> op;
  std::vector<Tensor> keep;      // tensors the library reads or writes while the op runs
  Tensor copy_back_to;           // a non-contiguous tensor the result is copied into
  bool done = false;

  // Waits (with the group's timeout) and finishes the op; idempotent.
  void wait() {
    if (done) return;
    wait_for(*op, what);
    op->finish();
    if (copy_back_to.defined()) {
      NoGradGuard no_grad;
      copy_back_to.copy_(keep.front());
    }
    keep.clear();
    copy_back_to = Tensor();
    done = true;
  }
  // A Work dropped before wait() still completes, as the library writes its buffers until then.
  ~Impl() {
    if (done || !op) return;
    try {
      std::lock_guard lock(state().mutex);
      wait();
    } catch (...) {
      // Timed out: the library may still write these buffers, so they are never freed.
      (void)op.release();
      (void)new std::vector<Tensor>(std::move(keep));
    }
  }
};

// ---- init and ranks ----

void init(const InitOptions& opts) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.world) return;
  // The environment is read first, so that a bad value raises before MPI starts.
  const auto timeout = env_number("EMBER_DIST_TIMEOUT"), check = env_number("EMBER_DIST_CHECK");
  const auto env_rank = env_number("RANK"), env_size = env_number("WORLD_SIZE");
  const auto env_local = env_number("LOCAL_RANK");
  s.opts = opts;
  if (timeout) s.opts.timeout_s = *timeout;
  if (check) s.opts.check_calls = *check != 0;
  // Without MPI in the build, a process asking for no more than itself is a world of one
  // (collectives keep their data; CUDA tensors still go through NCCL).
  const bool alone = !built_with_mpi() && (!env_size || *env_size == 1) && (!env_rank || *env_rank == 0);
  std::unique_ptr<World> world = alone ? make_single_world() : make_mpi_world();
  const int r = world->rank(), n = world->size();
  if ((env_rank && int(*env_rank) != r) || (env_size && int(*env_size) != n)) {
    world->finalize();
    EMBER_FAIL("distributed init:", env_rank ? " RANK=" + std::to_string(int(*env_rank)) : "",
               env_size ? " WORLD_SIZE=" + std::to_string(int(*env_size)) : "",
               " in the environment, but MPI started this process as rank ", r, " of ", n,
               "; ember's ranks are MPI's: start the processes with mpirun -np N, or unset "
               "RANK and WORLD_SIZE");
  }
  s.local_rank = env_local ? int(*env_local) : world->local_rank();
  s.world = std::move(world);
  s.seq = 0;
  s.broken.clear();
  if (s.opts.abort_on_uncaught_exception) s.prev_terminate = std::set_terminate(on_terminate);
  static bool exit_hook = false;
  if (!exit_hook) {
    std::atexit(finalize_at_exit);
    exit_hook = true;
  }
}

bool is_initialized() { return bool(state().world); }

void finalize() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.world) return;
  // Tell the ranks still calling collectives that this one is leaving (a header mismatch
  // there), rather than leaving them to wait for it until their timeout.
  if (s.broken.empty() && s.world->usable()) check_call(Collective::Finalize, nullptr, -1, -1);
  s.cuda.clear();
  s.world->finalize();
  s.world.reset();
  if (s.opts.abort_on_uncaught_exception) std::set_terminate(s.prev_terminate);
}

int rank() { return require_init("rank").world->rank(); }
int world_size() { return require_init("world_size").world->size(); }
int local_rank() { return require_init("local_rank"), state().local_rank; }

// ---- Work ----

void Work::wait() {
  if (!impl_ || impl_->done) return;
  State& s = state();
  std::lock_guard lock(s.mutex);
  try {
    impl_->wait();
  } catch (...) {
    s.abandoned.push_back(impl_);
    throw;
  }
}

bool Work::is_completed() {
  if (!impl_ || impl_->done) return true;
  std::lock_guard lock(state().mutex);
  return impl_->op->test();
}

namespace {

// The tensor a backend works on: t itself when contiguous, else a contiguous copy that wait()
// copies back into t (for ops that write it).
Tensor contiguous_for(const Tensor& t, Work::Impl& w, bool written) {
  if (t.is_contiguous()) {
    // The op writes t's memory behind autograd's back: bump the version so that a tensor saved
    // for backward before the op is seen as modified.
    if (written) t.impl()->storage->version++;
    return t;
  }
  NoGradGuard no_grad;
  Tensor c = t.contiguous();
  if (written) w.copy_back_to = t;
  return c;
}

Work start(Collective c, const Tensor& t, int reduce, int root,
           const std::function<std::unique_ptr<PendingOp>(Backend&, const Tensor&)>& run) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const int64_t seq = check_call(c, &t, reduce, root);
  auto w = std::make_shared<Work::Impl>();
  w->what = where(collective_name(c), seq);
  Tensor buf = contiguous_for(t, *w, true);
  w->keep.push_back(buf);
  w->op = run(backend_for(t), buf);
  return Work(std::move(w));
}

}  // namespace

// ---- collectives ----

namespace {
TensorOptions same_place(const Tensor& t) {
  TensorOptions o(t.dtype());
  o.device = t.device();
  return o;
}

// Rank 0's n bytes into `bytes` on every rank (NCCL's unique id), as an int64 CPU tensor.
void broadcast_bytes(void* bytes, size_t n) {
  Tensor buf = zeros({int64_t((n + 7) / 8)}, TensorOptions(DType::Int64));
  std::memcpy(buf.data_ptr(), bytes, n);
  broadcast(buf, 0);
  std::memcpy(bytes, buf.data_ptr(), n);
}
}  // namespace

Work all_reduce_async(const Tensor& t, ReduceOp op) {
  check_tensor(t, "all_reduce", true, op);
  return start(Collective::AllReduce, t, int(op), -1,
               [&](Backend& b, const Tensor& buf) { return b.all_reduce(buf, op); });
}

void all_reduce(const Tensor& t, ReduceOp op) { all_reduce_async(t, op).wait(); }

void broadcast(const Tensor& t, int root) {
  check_tensor(t, "broadcast", false, ReduceOp::Sum);
  const int n = world_size();
  EMBER_CHECK(root >= 0 && root < n, "distributed broadcast on rank ", rank(), ": root ", root,
              " is not a rank of a world of ", n);
  start(Collective::Broadcast, t, -1, root,
        [&](Backend& b, const Tensor& buf) { return b.broadcast(buf, root); })
      .wait();
}

Tensor all_gather(const Tensor& t) {
  check_tensor(t, "all_gather", false, ReduceOp::Sum);
  State& s = require_init("all_gather");
  std::lock_guard lock(s.mutex);
  const int64_t seq = check_call(Collective::AllGather, &t, -1, -1);
  Shape shape = t.sizes();
  if (shape.empty()) shape.push_back(1);
  shape[0] *= s.world->size();
  Tensor out = empty(shape, same_place(t));
  auto w = std::make_shared<Work::Impl>();
  w->what = where("all_gather", seq);
  Tensor in = contiguous_for(t, *w, false);
  w->keep = {out, in};
  w->op = backend_for(t).all_gather(in, out);
  Work(w).wait();
  return out;
}

Tensor reduce_scatter(const Tensor& t, ReduceOp op) {
  check_tensor(t, "reduce_scatter", true, op);
  State& s = require_init("reduce_scatter");
  std::lock_guard lock(s.mutex);
  const int n = s.world->size();
  EMBER_CHECK(t.dim() >= 1 && t.size(0) % n == 0, "distributed reduce_scatter on rank ",
              s.world->rank(), ": the tensor's shape ", t.shape_str(), " must have a first dim "
              "divisible by the world size ", n, " (each rank gets one block of rows)");
  const int64_t seq = check_call(Collective::ReduceScatter, &t, int(op), -1);
  Shape shape = t.sizes();
  shape[0] /= n;
  Tensor out = empty(shape, same_place(t));
  auto w = std::make_shared<Work::Impl>();
  w->what = where("reduce_scatter", seq);
  Tensor in = contiguous_for(t, *w, false);
  w->keep = {out, in};
  w->op = backend_for(t).reduce_scatter(in, out, op);
  Work(w).wait();
  return out;
}

void barrier() {
  State& s = require_init("barrier");
  std::lock_guard lock(s.mutex);
  const int64_t seq = check_call(Collective::Barrier, nullptr, -1, -1);
  auto w = std::make_shared<Work::Impl>();
  w->what = where("barrier", seq);
  w->op = s.world->cpu_backend().barrier();
  Work(w).wait();
}

}  // namespace ember::distributed
