// CUDA kernels of cast (every dtype to every dtype) and clone (the bits, by element size). A
// file of their own, apart from pointwise.cu, so that the library's largest CUDA sources
// compile in parallel.
#include "kernels/cuda/pointwise.cuh"

namespace ember::cuda {

namespace {

using namespace pointwise;

struct ToBool {
  template <class V> __device__ bool operator()(V v) const { return v != V(0); }
};
template <class D>
struct Convert {
  template <class V> __device__ compute_t<D> operator()(V v) const { return compute_t<D>(v); }
};
void cast(In in, Out out, const Attrs&) {
  visit<Kinds::All>(in[0].dtype(), "cast", [&]<class S>() {
    visit<Kinds::All>(out[0].dtype(), "cast", [&]<class D>() {
      if constexpr (std::is_same_v<D, bool>) elementwise<D, S>("cast", out[0], in, ToBool{});
      else elementwise<D, S>("cast", out[0], in, Convert<D>{});
    });
  });
}

// Copies the bits, by element size.
void clone(In in, Out out, const Attrs&) {
  switch (dtype_size(in[0].dtype())) {
    case 1: return elementwise<uint8_t, uint8_t>("clone", out[0], in, fn::Identity{});
    case 2: return elementwise<uint16_t, uint16_t>("clone", out[0], in, fn::Identity{});
    case 4: return elementwise<uint32_t, uint32_t>("clone", out[0], in, fn::Identity{});
    case 8: return elementwise<uint64_t, uint64_t>("clone", out[0], in, fn::Identity{});
  }
}

}  // namespace

void register_pointwise_cast(KernelTable& t) {
  t[OpId::cast] = cast;
  t[OpId::clone] = clone;
}

}  // namespace ember::cuda
