// The one-process world: rank 0 of 1, for a process started without a launcher in a build
// without MPI (or with WORLD_SIZE=1 there). Every collective over one rank leaves its data as
// it is (a sum, mean, max or min of one value, a broadcast from itself) or copies it (a gather
// or scatter of one block); CUDA tensors still go through NCCL, as a communicator of one rank.
#include <cstdlib>

#include "distributed/backend.h"

namespace ember::distributed {

namespace {

struct Done : PendingOp {
  bool test() override { return true; }
};

class SingleBackend : public Backend {
 public:
  std::string_view name() const override { return "single process"; }
  std::unique_ptr<PendingOp> all_reduce(const Tensor&, ReduceOp) override { return done(); }
  std::unique_ptr<PendingOp> broadcast(const Tensor&, int) override { return done(); }
  std::unique_ptr<PendingOp> all_gather(const Tensor& in, const Tensor& out) override {
    Tensor(out).copy_(in.reshape(out.sizes()));
    return done();
  }
  std::unique_ptr<PendingOp> reduce_scatter(const Tensor& in, const Tensor& out,
                                            ReduceOp) override {
    Tensor(out).copy_(in.reshape(out.sizes()));
    return done();
  }
  std::unique_ptr<PendingOp> barrier() override { return done(); }

 private:
  static std::unique_ptr<PendingOp> done() { return std::make_unique<Done>(); }
};

class SingleWorld : public World {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::unique_ptr<PendingOp> exchange(const CallHeader& mine,
                                      std::vector<CallHeader>& all) override {
    all.assign(1, mine);
    return std::make_unique<Done>();
  }
  Backend& cpu_backend() override { return backend_; }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }
  bool usable() const override { return true; }
  void finalize() override {}

 private:
  SingleBackend backend_;
};

}  // namespace

std::unique_ptr<World> make_single_world() { return std::make_unique<SingleWorld>(); }

}  // namespace ember::distributed
