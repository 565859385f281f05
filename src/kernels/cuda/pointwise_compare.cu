// CUDA kernels of the comparisons and where: the elementwise kernel (elementwise.cuh) over the
// functors the CPU kernels call. A file of their own, apart from pointwise.cu, so that the
// library's largest CUDA sources compile in parallel.
#include "kernels/cuda/pointwise.cuh"

namespace ember::cuda {

namespace {

using namespace pointwise;

template <class F>
void compare(const char* op, In in, Out out) {
  visit<Kinds::All>(in[0].dtype(), op,
                    [&]<class T>() { elementwise<bool, T, T>(op, out[0], in, F{}); });
}

#define EMBER_CUDA_COMPARE(name, F) \
  void name(In in, Out out, const Attrs&) { compare<F>(#name, in, out); }

EMBER_CUDA_COMPARE(eq, fn::Eq)
EMBER_CUDA_COMPARE(ne, fn::Ne)
EMBER_CUDA_COMPARE(lt, fn::Lt)
EMBER_CUDA_COMPARE(le, fn::Le)
EMBER_CUDA_COMPARE(gt, fn::Gt)
EMBER_CUDA_COMPARE(ge, fn::Ge)

void where(In in, Out out, const Attrs&) {
  visit<Kinds::All>(out[0].dtype(), "where", [&]<class T>() {
    elementwise<T, bool, T, T>("where", out[0], in, fn::Where{});
  });
}

}  // namespace

void register_pointwise_compare(KernelTable& t) {
  t[OpId::eq] = eq;
  t[OpId::ne] = ne;
  t[OpId::lt] = lt;
  t[OpId::le] = le;
  t[OpId::gt] = gt;
  t[OpId::ge] = ge;
  t[OpId::where] = where;
}

}  // namespace ember::cuda
