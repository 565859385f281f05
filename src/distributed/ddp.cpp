// DistributedDataParallel: parameters broadcast from rank 0, grads copied into buckets by
// autograd's post-accumulate hooks and averaged bucket by bucket as backward produces them.
#include <algorithm>

#include "ember/autograd.h"
#include "ember/distributed.h"
#include "ember/ops.h"

namespace ember::nn {

namespace dist = ember::distributed;

struct DistributedDataParallel::Bucket {
  Tensor flat;                 // the grads of `params`, flattened one after another
  std::vector<size_t> params;  // indices into params_
  std::vector<char> arrived;   // per entry of params: its grad was copied in this backward
  size_t pending = 0;          // entries still to arrive in this backward
  dist::Work work;
};

DistributedDataParallel::DistributedDataParallel(Module& module, DDPOptions opts)
    : module_(module), opts_(opts) {
  EMBER_CHECK(opts_.bucket_cap_mb > 0, "DistributedDataParallel on rank ", dist::rank(),
              ": bucket_cap_mb must be positive, got ", opts_.bucket_cap_mb);
  for (auto& [name, p] : module.named_parameters())
    if (p.requires_grad()) params_.emplace_back(name, p);

  // Rank 0's values everywhere (the same initialization on every rank).
  for (auto& [name, p] : params_) dist::broadcast(p, 0);
  if (opts_.broadcast_buffers) sync_buffers();

  // Buckets in reverse registration order, which is about the order backward finishes grads;
  // a new bucket at the cap or where the dtype or device changes.
  const double cap_bytes = opts_.bucket_cap_mb * 1024.0 * 1024.0;
  slot_of_.resize(params_.size());
  std::vector<std::pair<size_t, std::vector<size_t>>> groups;  // (elements, params)
  double bytes = 0;
  for (size_t i = params_.size(); i-- > 0;) {
    const Tensor& p = params_[i].second;
    const double nbytes = double(p.numel()) * double(dtype_size(p.dtype()));
    bool fresh = groups.empty() || bytes + nbytes > cap_bytes;
    if (!fresh) {
      const Tensor& first = params_[groups.back().second.front()].second;
      fresh = first.dtype() != p.dtype() || first.device() != p.device();
    }
    if (fresh) {
      groups.emplace_back(0, std::vector<size_t>{});
      bytes = 0;
    }
    slot_of_[i] = {groups.size() - 1, groups.back().second.size(), int64_t(groups.back().first)};
    groups.back().first += size_t(p.numel());
    groups.back().second.push_back(i);
    bytes += nbytes;
  }
  for (auto& [elements, members] : groups) {
    auto b = std::make_unique<Bucket>();
    const Tensor& first = params_[members.front()].second;
    TensorOptions where(first.dtype());
    where.device = first.device();
    b->flat = zeros({int64_t(elements)}, where);
    b->params = std::move(members);
    b->arrived.assign(b->params.size(), 0);
    buckets_.push_back(std::move(b));
  }

  for (size_t i = 0; i < params_.size(); ++i)
    hooks_.push_back(register_post_accumulate_grad_hook(
        params_[i].second, [this, i](const Tensor&) { on_grad_ready(i); }));
}

DistributedDataParallel::~DistributedDataParallel() {
  for (size_t i = 0; i < hooks_.size(); ++i)
    remove_post_accumulate_grad_hook(params_[i].second, hooks_[i]);
}

namespace {
// The slice of `flat` that holds parameter p's grad, shaped as p.
Tensor slice_of(const Tensor& flat, int64_t offset, const Tensor& p) {
  return flat.narrow(0, offset, p.numel()).view(p.sizes());
}
}  // namespace

void DistributedDataParallel::on_grad_ready(size_t i) {
  if (!sync_) return;
  const Tensor& p = params_[i].second;
  const Tensor g = p.grad();
  EMBER_CHECK(!g.defined() || !g.is_symbolic(), "DistributedDataParallel on rank ", dist::rank(),
              ": the grad of ", params_[i].first, " is a capture placeholder; call backward() "
              "outside compiled functions (compile the loss, not the backward)");
  if (queued_.expired()) {
    // The first grad of this backward: every bucket waits for all of its grads again. (The
    // token dies with the queued callback, after it ran or when a backward threw and dropped
    // it; the buckets such a backward started are waited for here, as the ranks started them.)
    auto token = std::make_shared<char>();
    queued_ = token;
    queue_backward_callback([this, token] { finish_backward(); });
    next_launch_ = 0;
    for (auto& b : buckets_) {
      b->work.wait();
      b->pending = b->params.size();
      std::fill(b->arrived.begin(), b->arrived.end(), 0);
    }
  }
  const Slot& slot = slot_of_[i];
  Bucket& b = *buckets_[slot.bucket];
  const size_t k = slot.entry;
  if (g.defined()) slice_of(b.flat, slot.offset, p).copy_(g);
  if (!b.arrived[k]) {
    b.arrived[k] = 1;
    if (--b.pending == 0) launch_ready_buckets(false);
  }
}

void DistributedDataParallel::launch_ready_buckets(bool all) {
  // In bucket order on every rank, whatever order their grads arrived in, so that the ranks'
  // collectives pair up.
  while (next_launch_ < buckets_.size() && (all || buckets_[next_launch_]->pending == 0)) {
    Bucket& b = *buckets_[next_launch_++];
    for (size_t k = 0; k < b.params.size(); ++k)
      if (!b.arrived[k])  // no grad from this rank: it counts as zeros
        slice_of(b.flat, slot_of_[b.params[k]].offset, params_[b.params[k]].second).zero_();
    b.work = dist::all_reduce_async(b.flat, dist::ReduceOp::Avg);
    ++(all ? stats_.buckets_started_late : stats_.buckets_started_early);
  }
}

void DistributedDataParallel::finish_backward() {
  ++stats_.syncs;
  launch_ready_buckets(true);
  for (auto& b : buckets_) {
    b->work.wait();
    for (size_t i : b->params) {
      const Tensor& p = params_[i].second;
      const Tensor avg = slice_of(b->flat, slot_of_[i].offset, p);
      const Tensor g = p.grad();
      if (g.defined()) Tensor(g).copy_(avg);
      else p.set_grad(avg.clone());
    }
  }
}

void DistributedDataParallel::sync_grads() {
  EMBER_CHECK(queued_.expired(), "DistributedDataParallel::sync_grads on rank ", dist::rank(),
              ": called while a backward is averaging the grads");
  NoGradGuard no_grad;
  next_launch_ = 0;
  for (auto& b : buckets_) {
    for (size_t k = 0; k < b->params.size(); ++k) {
      const Tensor& p = params_[b->params[k]].second;
      const Tensor g = p.grad();
      b->arrived[k] = g.defined();
      if (g.defined()) slice_of(b->flat, slot_of_[b->params[k]].offset, p).copy_(g);
    }
  }
  finish_backward();
}

void DistributedDataParallel::sync_buffers() {
  NoGradGuard no_grad;
  for (auto& [name, b] : module_.named_buffers()) dist::broadcast(b, 0);
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : buckets_) {
    out.emplace_back();
    for (size_t i : b->params) out.back().push_back(params_[i].first);
  }
  return out;
}

}  // namespace ember::nn
