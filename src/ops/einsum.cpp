// einsum over one or two operands, as a composite: letters summed within one operand are
// summed first; two operands are permuted to [batch, kept, contracted] and [batch,
// contracted, kept], multiplied by one batched matmul, and the result permuted to the output's
// letter order. Each letter appears at most once in an operand (no diagonals) and there is no
// ellipsis; both are errors that say so.
#include <algorithm>
#include <cctype>
#include <map>

#include "ops/frontend.h"

namespace ember {

namespace {

struct Equation {
  std::vector<std::string> inputs;
  std::string output;
};

Equation parse(const std::string& eq, size_t operands) {
  std::string s;
  for (char c : eq)
    if (c != ' ') s += c;
  EMBER_CHECK(s.find("...") == std::string::npos, "einsum: \"", eq,
              "\": ellipsis (...) is not supported; name every dim with a letter");
  Equation e;
  const size_t arrow = s.find("->");
  const std::string lhs = arrow == std::string::npos ? s : s.substr(0, arrow);
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    e.inputs.push_back(lhs.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  EMBER_CHECK(e.inputs.size() == operands, "einsum: \"", eq, "\" names ", e.inputs.size(),
              " operands but ", operands, " were given");
  EMBER_CHECK(operands == 1 || operands == 2, "einsum: one or two operands are supported, got ",
              operands, "; chain several einsum calls");
  std::map<char, int> count;
  for (const std::string& in : e.inputs)
    for (char c : in) {
      EMBER_CHECK(std::isalpha(static_cast<unsigned char>(c)), "einsum: \"", eq,
                  "\": '", c, "' is not a letter");
      EMBER_CHECK(std::count(in.begin(), in.end(), c) == 1, "einsum: \"", eq, "\": letter '", c,
                  "' appears twice in one operand (diagonals are not supported)");
      count[c]++;
    }
  if (arrow != std::string::npos) {
    e.output = s.substr(arrow + 2);
    for (char c : e.output) {
      EMBER_CHECK(count.count(c), "einsum: \"", eq, "\": output letter '", c,
                  "' is in no operand");
      EMBER_CHECK(std::count(e.output.begin(), e.output.end(), c) == 1, "einsum: \"", eq,
                  "\": output letter '", c, "' appears twice");
    }
  } else {
    for (auto& [c, n] : count)
      if (n == 1) e.output += c;  // std::map: alphabetical
  }
  return e;
}

// t (letters `have`) summed over the letters not in `keep`; `have` is updated.
Tensor sum_unused(const Tensor& t, std::string& have, const std::string& keep) {
  Shape dims;
  std::string left;
  for (size_t i = 0; i < have.size(); ++i)
    if (keep.find(have[i]) == std::string::npos) dims.push_back(int64_t(i));
    else left += have[i];
  have = left;
  return dims.empty() ? t : t.sum(dims);
}

// t (letters `have`) permuted to the letters of `want` (the same set).
Tensor permute_to(const Tensor& t, const std::string& have, const std::string& want) {
  Shape perm;
  for (char c : want) perm.push_back(int64_t(have.find(c)));
  return t.permute(perm);
}

int64_t size_of(const std::map<char, int64_t>& sizes, const std::string& letters) {
  int64_t n = 1;
  for (char c : letters) n *= sizes.at(c);
  return n;
}

}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  for (const Tensor& t : operands) EMBER_CHECK(t.defined(), "einsum: undefined tensor argument");
  const Equation e = parse(equation, operands.size());
  std::map<char, int64_t> sizes;
  for (size_t k = 0; k < operands.size(); ++k) {
    EMBER_CHECK(int64_t(e.inputs[k].size()) == operands[k].dim(), "einsum: \"", equation,
                "\": operand ", k, " has shape ", operands[k].shape_str(), " but ",
                e.inputs[k].size(), " letters");
    for (size_t i = 0; i < e.inputs[k].size(); ++i) {
      const char c = e.inputs[k][i];
      const int64_t n = operands[k].size(int64_t(i));
      auto [it, fresh] = sizes.emplace(c, n);
      EMBER_CHECK(fresh || it->second == n, "einsum: \"", equation, "\": letter '", c,
                  "' is ", it->second, " in one place and ", n, " in another");
    }
  }
  if (operands.size() == 1) {
    std::string have = e.inputs[0];
    const Tensor t = sum_unused(operands[0], have, e.output);
    return permute_to(t, have, e.output);
  }
  // Letters each operand alone has and the output does not need are summed away first.
  std::string la = e.inputs[0], lb = e.inputs[1];
  Tensor a = sum_unused(operands[0], la, e.output + lb);
  Tensor b = sum_unused(operands[1], lb, e.output + la);
  std::string batch, contracted, a_kept, b_kept;
  for (char c : la) {
    const bool in_b = lb.find(c) != std::string::npos, in_out = e.output.find(c) != std::string::npos;
    (in_b ? (in_out ? batch : contracted) : a_kept) += c;
  }
  for (char c : lb)
    if (la.find(c) == std::string::npos) b_kept += c;
  const int64_t B = size_of(sizes, batch), M = size_of(sizes, a_kept), N = size_of(sizes, b_kept),
                K = size_of(sizes, contracted);
  const Tensor am = permute_to(a, la, batch + a_kept + contracted).reshape({B, M, K});
  const Tensor bm = permute_to(b, lb, batch + contracted + b_kept).reshape({B, K, N});
  Shape result_shape;
  const std::string result = batch + a_kept + b_kept;
  for (char c : result) result_shape.push_back(sizes.at(c));
  const Tensor r = matmul(am, bm).reshape(result_shape);
  return permute_to(r, result, e.output);
}

}  // namespace ember
