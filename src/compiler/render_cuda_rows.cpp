// Rendering row kernels as CUDA (render_cuda.h): one block per row of the domain. Each thread
// takes the columns j = tid, tid + B, ...; each Max or Sum step reduces its values within the
// block (warp shuffles, then one partial per warp through shared memory), so every thread holds
// the row statistic. When the row length is a constant of at most 16 columns per thread, the
// row op's input and a kept value stay in registers between the passes; otherwise each pass
// computes them again from the inputs (which the first pass brought into cache).
#include <algorithm>

#include "compiler/codegen_util.h"
#include "compiler/render_common.h"
#include "compiler/render_cpp.h"
#include "compiler/render_cuda.h"

namespace ember::compiler {

namespace {

constexpr int64_t kMaxRegisterColumns = 16;  // per thread

int pow2_at_least(int64_t v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

}  // namespace

CudaLaunch render_cuda_rows(std::ostringstream& os, const kir::Kernel& k) {
  const kir::RowProgram& rp = *k.rows;
  CudaLaunch l;
  l.rows = true;
  int out_buffer = -1;
  for (size_t b = 0; b < k.buffers.size() && out_buffer < 0; ++b)
    if (k.buffers[b].output) out_buffer = int(b);
  // Computed in the row op's type; the output stored as its own (a 16-bit float after a cast).
  const DType dt = rp.compute, out_dt = k.buffers[size_t(out_buffer)].dtype;
  const char* T = c_type(dt);
  const char* OT = storage_type(out_dt);
  const kir::Index n_expr = k.domain.back();
  l.work = n_expr.is_constant() && n_expr.constant() == 0 ? kir::Index(0)
                                                          : floordiv(k.numel(), n_expr);
  // Threads: about 16 columns each, 32 to 1024 (short rows: a warp, whose reductions are
  // shuffles alone; many rows in flight per multiprocessor); the row in registers when it fits.
  int K = 0;  // columns per thread held in registers, 0: none
  if (n_expr.is_constant()) {
    const int64_t n = n_expr.constant();
    l.block = std::clamp(pow2_at_least((n + 15) / 16), 32, 1024);
    const int64_t per = (n + l.block - 1) / l.block;
    if (per <= kMaxRegisterColumns) K = int(std::max<int64_t>(per, 1));
  } else {
    l.block = 256;
  }
  os << "// " << k.name << ": a row kernel over rows of " << n_expr.str() << ", a block of "
     << l.block << " per row" << (K ? ", held in registers" : "") << "\n";
  for (const std::string& line : k.comment) os << "//   " << line << "\n";
  os << "extern \"C\" __global__ void __launch_bounds__(" << l.block << ") " << k.name << "(";
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    const kir::Buffer& buf = k.buffers[b];
    os << (b ? ", " : "");
    if (!buf.output)
      os << "const " << T << "* __restrict__ in" << b;
    else if (int(b) == out_buffer)
      os << OT << "* __restrict__ out";
    else
      os << T << "* __restrict__ stat" << b;
  }
  for (int sym : k.size_symbols()) os << ", const int64_t " << loop_names(sym);
  os << ") {\n"
     << "  __shared__ " << T << " red[32];\n"
     << "  const int64_t n = " << n_expr.str(loop_names) << ";\n"
     << "  const int64_t r = blockIdx.x;\n"
     << "  const int tid = threadIdx.x;\n";
  emit_uniform_row_loads(os, k, T);
  // Each load's offset: a row base b<p>, computed once, and a column term.
  RowOffsets offsets(k);
  for (size_t p = 0; p < offsets.entries.size(); ++p)
    if (!offsets.entries[p].row.empty())
      os << "  const int64_t b" << p << " = " << offsets.entries[p].row << ";\n";
  auto offset = [&](const kir::Stmt& s) { return offsets.offset(s); };
  // The step whose values are kept (read back by Kept statements), if any.
  const kir::RowStep* keeper = nullptr;
  for (const kir::RowStep& st : rp.steps)
    if (st.keep) keeper = &st;
  if (K) os << "  " << T << " xr[" << K << "];\n";
  if (K && keeper) os << "  " << T << " kr[" << K << "];\n";
  // 16-byte accesses: with the row in registers and its length a multiple of the vector, each
  // thread takes V adjacent columns per slot, and loads along the row (unit stride) and the
  // output's stores move V elements at once, where the block's rows are aligned for it.
  const int V = 16 / int(dtype_size(dt));
  const bool vectors = K && K % V == 0 && n_expr.constant() % V == 0;
  std::vector<size_t> along;  // offsets read along the row: vector loads
  for (size_t p = 0; p < offsets.entries.size(); ++p)
    if (offsets.entries[p].col == "j") along.push_back(p);
  const std::string vec = "ember_vec<" + std::string(T) + ", " + std::to_string(V) + ">",
                    out_vec = "ember_vec<" + std::string(OT) + ", " + std::to_string(V) + ">";
  // The passes over the row, with scalar or vector accesses.
  auto emit_passes = [&](bool vec_mode, const std::string& ind) {
    const std::string slot = vec_mode ? "cu" : "c";
    // A loop over this thread's columns; `body` (lines at column j, register slot `slot`)
    // inside; in vector mode, the vector loads `stmts` read first, and `store` (the output
    // pass) the vector store after.
    auto columns = [&](const std::string& body, const std::vector<const std::vector<kir::Stmt>*>& stmts,
                       bool store) {
      if (!K) {
        os << ind << "for (int64_t j = tid; j < n; j += " << l.block << ") {\n"
           << indent(body, ind.substr(2)) << ind << "}\n";
        return;
      }
      if (!vec_mode) {
        os << "#pragma unroll\n"
           << ind << "for (int c = 0; c < " << K << "; ++c) {\n"
           << ind << "  const int64_t j = tid + int64_t(c) * " << l.block << ";\n"
           << ind << "  if (j < n) {\n"
           << indent(body, ind) << ind << "  }\n" << ind << "}\n";
        return;
      }
      os << "#pragma unroll\n"
         << ind << "for (int c = 0; c < " << K / V << "; ++c) {\n"
         << ind << "  const int64_t jv = (tid + int64_t(c) * " << l.block << ") * " << V << ";\n"
         << ind << "  if (jv < n) {\n";
      std::vector<std::pair<int, size_t>> used;  // (buffer, offset) read as vectors
      for (const auto* list : stmts)
        for (const kir::Stmt& st : *list)
          if (st.kind == kir::Stmt::Kind::Load && !k.uniform(st))
            for (size_t p : along)
              if (offsets.entries[p].index == st.index &&
                  std::find(used.begin(), used.end(), std::make_pair(st.buffer, p)) == used.end())
                used.push_back({st.buffer, p});
      for (const auto& [buffer, p] : used)
        os << ind << "    const " << vec << " L" << buffer << "_" << p
           << " = *reinterpret_cast<const " << vec << "*>(in" << buffer << " + " << offsets.base(p)
           << " + jv);\n";
      if (store) os << ind << "    " << out_vec << " o;\n";
      os << "#pragma unroll\n"
         << ind << "    for (int u = 0; u < " << V << "; ++u) {\n"
         << ind << "      const int64_t j = jv + u;\n"
         << ind << "      const int cu = c * " << V << " + u;\n"
         << indent(body, ind + "    ") << ind << "    }\n";
      if (store) os << ind << "    *reinterpret_cast<" << out_vec << "*>(out + r * n + jv) = o;\n";
      os << ind << "  }\n" << ind << "}\n";
    };
    RowSpell spell{k, offset, K ? "kr[" + slot + "]" : "kept", ""};
    if (vec_mode)
      spell.element = [&](const kir::Stmt& st) {
        for (size_t p : along)
          if (offsets.entries[p].index == st.index)
            return "L" + std::to_string(st.buffer) + "_" + std::to_string(p) + ".e[u]";
        return std::string();
      };
    // The row op's input x at column j where `stmts` (and `value`) read it: computed by the
    // producers (the first pass, or every pass without registers), or read back from the
    // registers.
    auto input_at = [&](bool first, const std::vector<kir::Stmt>& stmts, const std::string& value) {
      std::ostringstream b;
      if (K && !first) {
        if (reads_value(stmts, value, rp.input))
          b << "    const " << T << " " << rp.input << " = xr[" << slot << "];\n";
      } else if (first || reads_value(stmts, value, rp.input)) {
        spell(b, rp.pre, "    ");
        if (K) b << "    xr[" << slot << "] = " << rp.input << ";\n";
      }
      return b.str();
    };
    bool first = true;
    for (const kir::RowStep& step : rp.steps) {
      if (step.kind == kir::RowStep::Kind::Let) {
        std::ostringstream b;
        spell(b, step.body, ind);
        os << b.str() << ind << "const " << T << " " << step.name << " = " << step.value << ";\n";
        continue;
      }
      const bool max = step.kind == kir::RowStep::Kind::Max;
      const std::string acc = step.name + "_acc";
      os << ind << T << " " << acc << " = "
         << (max ? std::string("ember_neg_inf<") + T + ">()" : std::string(T) + "(0)") << ";\n";
      std::ostringstream body;
      body << input_at(first, step.body, step.value);
      spell(body, step.body, "    ");
      if (K && &step == keeper) body << "    kr[" << slot << "] = " << step.value << ";\n";
      body << "    " << acc << " = "
           << (max ? "ember_max(" + acc + ", " + step.value + ")" : acc + " + " + step.value)
           << ";\n";
      std::vector<const std::vector<kir::Stmt>*> lists{&step.body};
      if (first || !K) lists.push_back(&rp.pre);
      columns(body.str(), lists, false);
      os << ind << "const " << T << " " << step.name << " = ember_block_reduce<" << T << ", "
         << (max ? "true" : "false") << ">(" << acc << ", red);\n";
      first = false;
    }
    if (!rp.stats.empty()) {
      os << ind << "if (tid == 0) {\n";
      for (const auto& [buffer, name] : rp.stats)
        os << ind << "  stat" << buffer << "[r] = " << name << ";\n";
      os << ind << "}\n";
    }
    if (!rp.row_output) {
      RowSpell s = spell;
      s.element = nullptr;
      s.store_to = "out[r]";
      os << ind << "if (tid == 0) {\n" << ind << "  const int64_t j = 0;\n";
      s(os, rp.out, ind + "  ");
      os << ind << "}\n";
      return;
    }
    // The output pass: without registers, the row op's input and the kept value computed
    // again first, then the consumers (less what is already defined: a consumer may load the
    // row op's input itself).
    std::ostringstream body;
    std::vector<kir::Stmt> out = rp.out;
    if (K) {
      body << input_at(false, rp.out, "");
    } else {
      std::vector<std::string> defined;
      auto fresh = [&](const std::vector<kir::Stmt>& list) {
        std::vector<kir::Stmt> kept_list;
        for (const kir::Stmt& st : list) {
          if (st.kind != kir::Stmt::Kind::Store &&
              std::find(defined.begin(), defined.end(), st.out) != defined.end())
            continue;
          if (st.kind != kir::Stmt::Kind::Store) defined.push_back(st.out);
          kept_list.push_back(st);
        }
        return kept_list;
      };
      const bool need_x = (keeper && reads_value(keeper->body, keeper->value, rp.input)) ||
                          reads_value(rp.out, "", rp.input);
      if (need_x) spell(body, fresh(rp.pre), "    ");
      if (keeper) {
        spell(body, fresh(keeper->body), "    ");
        body << "    const " << T << " kept = " << keeper->value << ";\n";
      }
      out = fresh(rp.out);
    }
    RowSpell s = spell;
    s.store_to = vec_mode ? "o.e[u]" : "out[r * n + j]";
    s(body, out, "    ");
    columns(body.str(), {&rp.out, &rp.pre}, vec_mode);
  };
  if (vectors) {
    // Aligned when every row read along and the output row start on 16 bytes (uniform over
    // the block, so both branches keep the block's reductions together).
    std::string aligned = "(reinterpret_cast<uintptr_t>(out + r * n) % 16) == 0";
    std::vector<std::pair<int, size_t>> checked;
    auto check = [&](const kir::Stmt& st) {
      if (st.kind != kir::Stmt::Kind::Load || k.uniform(st)) return;
      for (size_t p : along)
        if (offsets.entries[p].index == st.index &&
            std::find(checked.begin(), checked.end(), std::make_pair(st.buffer, p)) == checked.end()) {
          checked.push_back({st.buffer, p});
          aligned += " && (reinterpret_cast<uintptr_t>(in" + std::to_string(st.buffer) + " + " +
                     offsets.base(p) + ") % 16) == 0";
        }
    };
    for (const std::vector<kir::Stmt>* list : {&rp.pre, &rp.out})
      for (const kir::Stmt& st : *list) check(st);
    for (const kir::RowStep& st : rp.steps)
      for (const kir::Stmt& x : st.body) check(x);
    os << "  if (" << aligned << ") {\n";
    emit_passes(true, "    ");
    os << "  } else {\n";
    emit_passes(false, "    ");
    os << "  }\n";
  } else {
    emit_passes(false, "  ");
  }
  os << "}\n\n";
  return l;
}

}  // namespace ember::compiler
