// Rendering elementwise kernels as CUDA (render_cuda.h): a grid-stride loop over the output's
// flat elements. Where every buffer read element for element (and the output) is aligned for
// it, a thread takes 16 bytes of each at a step, as one vector access per buffer, the
// statements unrolled over the group; the rest (a tail, or unaligned buffers) runs one element
// at a time. Inputs read broadcast or strided load per element through their index math; in the
// vector loop, when the last dim is a multiple of the vector, that math starts from coordinates
// computed once a vector.
#include <algorithm>
#include <functional>

#include "compiler/codegen_util.h"
#include "compiler/render_common.h"
#include "compiler/render_cuda.h"

namespace ember::compiler {

using kir::Index;
using kir::Stmt;

namespace {

// The parameter list: typed buffers, then the size symbols.
std::string parameters(const kir::Kernel& k) {
  std::string p;
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    const kir::Buffer& buf = k.buffers[b];
    const char* S = storage_type(buf.dtype);
    if (!p.empty()) p += ", ";
    p += buf.output ? std::string(S) + "* __restrict__ out"
                    : std::string("const ") + S + "* __restrict__ in" + std::to_string(b);
  }
  for (int sym : k.size_symbols()) p += ", const int64_t " + loop_names(sym);
  return p;
}

// Symbols of the vector loop's per-vector coordinates: c<d> for the outer dims of the vector's
// first element, cl for the element's last coordinate (cl0 + u).
constexpr int kVecLast = kir::kCoord - 4, kVecOuter = kir::kCoord - 64;

std::string vector_names(int id) {
  if (id == kVecLast) return "cl";
  if (id >= kVecOuter && id < kVecLast)
    return std::string("c").append(std::to_string(id - kVecOuter));
  return loop_names(id);
}

// Whether masked load s reads, for the V columns cl0 .. cl0 + V - 1 of a vector (cl0 a multiple
// of V), either all of them at consecutive offsets or none: each condition is j >= a or j < a
// with a a multiple of V, and the offset steps by one along j. Such a load takes one vector
// access a vector (cat's and slice grads' pieces).
bool vector_uniform_mask(const Stmt& s, int last, int V) {
  const Index j = kir::coord(last);
  auto step = [&](const Index& e) {
    return e.substitute([&](int id) -> std::optional<Index> {
      if (id == kir::kCoord + last) return j + 1;
      return std::nullopt;
    }) - e;
  };
  auto at0 = [&](const Index& e) {
    return e.substitute([&](int id) -> std::optional<Index> {
      if (id == kir::kCoord + last) return Index(0);
      return std::nullopt;
    });
  };
  if (s.when.empty() || step(s.index) != Index(1)) return false;
  for (const sym::Rel& r : s.when) {
    if (r.op != sym::Rel::Op::Ge && r.op != sym::Rel::Op::Lt) return false;
    const Index c = at0(r.diff);
    if (step(r.diff) != Index(1) || !c.is_constant() || c.constant() % V != 0) return false;
  }
  return true;
}

}  // namespace

CudaLaunch render_cuda_elementwise(std::ostringstream& os, const kir::Kernel& k) {
  CudaLaunch l;
  l.block = 256;
  l.work = k.numel();
  int out_buffer = -1;
  for (size_t b = 0; b < k.buffers.size(); ++b)
    if (k.buffers[b].output) out_buffer = int(b);
  const DType dt = k.buffers[size_t(out_buffer)].dtype;
  const Index flat = k.contiguous_index();
  // The buffers a vector step reads element for element: each is loaded as one access.
  bool masked = false, reads_out = false, strided = false;
  std::vector<int> flat_buffers;
  for (const Stmt& s : k.body) {
    if (s.kind != Stmt::Kind::Load || k.uniform(s)) continue;
    if (s.iota) {  // computed from its offset: nothing to load
      strided |= s.index != flat;
      continue;
    }
    masked |= !s.when.empty();
    reads_out |= k.buffers[size_t(s.buffer)].output;
    strided |= s.index != flat;
    if (s.when.empty() && s.index == flat &&
        std::find(flat_buffers.begin(), flat_buffers.end(), s.buffer) == flat_buffers.end())
      flat_buffers.push_back(s.buffer);
  }
  size_t widest = dtype_size(dt);
  for (int b : flat_buffers) widest = std::max(widest, dtype_size(k.buffers[size_t(b)].dtype));
  // Masked loads (conditions on the last coordinate) take the vector loop only where a vector
  // stays within one row, so its column is cl0 + u there.
  const int lanes = int(16 / widest);
  const bool row_of_vectors = !k.domain.empty() && k.domain.back().is_constant() &&
                              k.domain.back().constant() % lanes == 0;
  // A store only where a condition holds leaves the other elements as they are: one element
  // at a time (a vector store would write them all).
  const bool store_if = std::any_of(k.body.begin(), k.body.end(), [](const Stmt& s) {
    return s.kind == Stmt::Kind::Store && !s.store_if.empty();
  });
  l.vector = reads_out || store_if || (masked && !row_of_vectors) ? 1 : lanes;

  os << "// " << k.name << ": elementwise over [";
  for (size_t d = 0; d < k.domain.size(); ++d) os << (d ? ", " : "") << k.domain[d].str();
  os << "]\n";
  for (const std::string& line : k.comment) os << "//   " << line << "\n";
  os << "extern \"C\" __global__ void __launch_bounds__(" << l.block << ") " << k.name << "("
     << parameters(k) << ") {\n";
  for (const Stmt& s : k.body)
    if (k.uniform(s))
      os << "  " << value_decl(s) << load_value(s.dtype, buffer_name(k, s.buffer) + "[0]")
         << ";\n";
  os << "  const int64_t n = " << l.work.str(loop_names) << ";\n"
     << "  const int64_t stride = int64_t(gridDim.x) * blockDim.x;\n"
     << "  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;\n";
  const Index::Substitution coords = flat_coordinates(k.domain, kVarI);
  auto offset = [&](const Stmt& s) {
    if (s.index == flat) return std::string("i");
    return s.index.substitute(coords).str(loop_names);
  };
  // A masked load's conditions read the last coordinate as j.
  std::string column;
  if (masked)
    column = "const int64_t j = " +
             Index::symbol(kir::kCoord + int(k.domain.size()) - 1).substitute(coords).str(loop_names) +
             ";\n";
  os << "  int64_t i0 = 0;\n";
  if (l.vector > 1) {
    const int V = l.vector;
    // When the last dim is a multiple of V, a vector's elements share their outer coordinates:
    // those are computed once a vector (from its first element, ib) and the last one steps by
    // u, so inputs read through index math cost a division a vector, not one an element.
    const size_t nd = k.domain.size();
    const bool shared_coords = (strided || masked) && row_of_vectors &&
                               nd < size_t(kVecLast - kVecOuter);
    const Index::Substitution at_ib = flat_coordinates(k.domain, kVecOuter - 1);
    auto vec_offset = [&](const Stmt& s) {
      if (s.index == flat) return std::string("i");
      return s.index
          .substitute([&](int id) -> std::optional<Index> {
            if (id < kir::kCoord || size_t(id - kir::kCoord) >= nd) return std::nullopt;
            const size_t d = size_t(id - kir::kCoord);
            return Index::symbol(d + 1 == nd ? kVecLast : kVecOuter + int(d));
          })
          .str(vector_names);
    };
    auto vec = [&](DType t) {
      return std::string("ember_vec<") + storage_type(t) + ", " + std::to_string(V) + ">";
    };
    std::string aligned = "(reinterpret_cast<uintptr_t>(out) % sizeof(" + vec(dt) + ")) == 0";
    for (int b : flat_buffers)
      aligned += " && (reinterpret_cast<uintptr_t>(in" + std::to_string(b) + ") % sizeof(" +
                 vec(k.buffers[size_t(b)].dtype) + ")) == 0";
    os << "  if (" << aligned << ") {\n"
       << "    const int64_t nv = n / " << V << ";\n"
       << "    for (int64_t q = t; q < nv; q += stride) {\n";
    if (shared_coords) {
      auto ib_names = [](int id) { return id == kVecOuter - 1 ? std::string("ib") : loop_names(id); };
      os << "      const int64_t ib = q * " << V << ";\n";
      for (size_t d = 0; d < nd; ++d) {
        const Index c = *at_ib(kir::kCoord + int(d));
        os << "      const int64_t ";
        if (d + 1 == nd)
          os << "cl0";
        else
          os << "c" << d;
        os << " = " << c.str(ib_names) << ";\n";
      }
    }
    for (int b : flat_buffers) {
      const std::string ty = vec(k.buffers[size_t(b)].dtype);
      os << "      const " << ty << " a" << b << " = *reinterpret_cast<const " << ty << "*>(in"
         << b << " + q * " << V << ");\n";
    }
    // Masked loads that hold or fail for a whole vector: one access at cl0 where they hold
    // (16-byte aligned, else element by element), zeros where they fail.
    std::vector<std::string> masked_vectors(k.body.size());
    if (shared_coords)
      for (size_t i = 0; i < k.body.size(); ++i) {
        const Stmt& s = k.body[i];
        if (s.kind != Stmt::Kind::Load || k.uniform(s) || s.iota ||
            !vector_uniform_mask(s, int(nd) - 1, V))
          continue;
        auto at_cl0 = [&](int id) {
          return id == kVecLast ? std::string("cl0") : vector_names(id);
        };
        auto first = [&](const Index& e) {
          return e.substitute([&](int id) -> std::optional<Index> {
            if (id < kir::kCoord || size_t(id - kir::kCoord) >= nd) return std::nullopt;
            const size_t d = size_t(id - kir::kCoord);
            return Index::symbol(d + 1 == nd ? kVecLast : kVecOuter + int(d));
          });
        };
        std::string cond;
        for (const sym::Rel& r : s.when)
          cond += (cond.empty() ? "" : " && ") +
                  sym::Rel{r.op, first(r.diff)}.str(at_cl0);
        const std::string ty = vec(s.dtype), m = "m" + std::to_string(i);
        const std::string src = buffer_name(k, s.buffer);
        os << "      " << ty << " " << m << " = {};\n"
           << "      if (" << cond << ") {\n"
           << "        const " << storage_type(s.dtype) << "* p = " << src << " + ("
           << first(s.index).str(at_cl0) << ");\n"
           << "        if (reinterpret_cast<uintptr_t>(p) % sizeof(" << ty << ") == 0) " << m
           << " = *reinterpret_cast<const " << ty << "*>(p);\n"
           << "        else for (int u = 0; u < " << V << "; ++u) " << m << ".e[u] = p[u];\n"
           << "      }\n";
        masked_vectors[i] = m + ".e[u]";
      }
    os << "      " << vec(dt) << " o;\n"
       << "#pragma unroll\n"
       << "      for (int u = 0; u < " << V << "; ++u) {\n"
       << "        const int64_t i = q * " << V << " + u;\n";
    if (shared_coords) os << "        const int64_t cl = cl0 + u;\n";
    if (masked) os << "        const int64_t j = cl;\n";
    emit_pointwise_body(os, k, "        ", shared_coords ? std::function<std::string(const Stmt&)>(vec_offset)
                                                      : std::function<std::string(const Stmt&)>(offset),
                        "o.e[u]", [&](const Stmt& s) {
      const size_t i = size_t(&s - k.body.data());
      if (i < masked_vectors.size() && !masked_vectors[i].empty()) return masked_vectors[i];
      if (s.index != flat || !s.when.empty() || s.iota) return std::string();
      return "a" + std::to_string(s.buffer) + ".e[u]";
    }, [&](const Stmt& s) {
      // The vector's first element q * V starts a Philox block (V a multiple of 4): its
      // elements' blocks spelled from q, alike for four neighbours.
      if (s.index != flat || V % 4 != 0) return std::string();
      return "uint64_t(q) * " + std::to_string(V / 4) + " + " + "uint64_t(u / 4), u & 3";
    });
    os << "      }\n"
       << "      *reinterpret_cast<" << vec(dt) << "*>(out + q * " << V << ") = o;\n"
       << "    }\n"
       << "    i0 = nv * " << V << ";\n"
       << "  }\n";
  }
  os << "  for (int64_t i = i0 + t; i < n; i += stride) {\n";
  if (!column.empty()) os << "    " << column;
  emit_pointwise_body(os, k, "    ", offset, "out[i]");
  os << "  }\n}\n\n";
  return l;
}

}  // namespace ember::compiler
