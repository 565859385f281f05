// Runs every registered OpCase: forward against float64 references over dtypes, shapes and
// strided layouts; gradcheck in float64; and checks that every op in the table is covered.
#include <gtest/gtest.h>

#include <set>

#include "ops/op_impl.h"
#include "support/op_cases.h"

namespace ember::test {
namespace {

Inputs default_inputs(const Shapes& shapes, DType dtype) {
  Inputs in;
  for (const Shape& s : shapes) in.push_back(random_tensor(s, dtype));
  return in;
}

std::string describe(const OpCase& c, const Shapes& shapes, DType dtype, bool strided) {
  std::string s = c.name + " dtype=" + std::string(dtype_name(dtype)) + " shapes=";
  for (const Shape& sh : shapes) s += shape_str(sh);
  if (strided) s += " (strided inputs)";
  return s;
}

TEST(OpTable, EveryOpHasATestCase) {
  std::set<OpId> covered;
  for (const OpCase& c : all_op_cases())
    for (OpId op : c.covers) covered.insert(op);
  std::vector<std::string> missing;
  for (int i = 0; i < kNumOps; ++i)
    if (!covered.count(OpId(i))) missing.push_back(std::string(op_name(OpId(i))));
  std::string list;
  for (auto& m : missing) list += m + " ";
  EXPECT_TRUE(missing.empty()) << "ops without a test case: " << list;
}

TEST(OpTable, EveryOpIsFullyImplemented) {
  auto problems = validate_op_table();
  std::string list;
  for (auto& p : problems) list += p + "\n";
  EXPECT_TRUE(problems.empty()) << list;
}

TEST(OpTable, ForwardMatchesFloat64Reference) {
  ASSERT_FALSE(all_op_cases().empty());
  for (const OpCase& c : all_op_cases()) {
    for (DType dtype : c.dtypes) {
      for (const Shapes& shapes : c.shapes) {
        Inputs in = c.make_inputs ? c.make_inputs(shapes, dtype) : default_inputs(shapes, dtype);
        std::vector<Ref> refs;
        for (const Tensor& t : in) refs.push_back(to_ref(t));
        std::vector<Ref> want = c.reference(refs);
        for (bool strided : {false, true}) {
          if (strided && !c.strided) continue;
          Inputs run_in = in;
          if (strided)
            for (Tensor& t : run_in) t = strided_copy(t);
          Inputs got;
          try {
            got = c.run(run_in);
          } catch (const std::exception& e) {
            ADD_FAILURE() << describe(c, shapes, dtype, strided) << ": threw " << e.what();
            continue;
          }
          ASSERT_EQ(got.size(), want.size()) << describe(c, shapes, dtype, strided);
          for (size_t k = 0; k < got.size(); ++k) {
            double tol = is_floating(got[k].dtype()) ? tolerance(dtype) * c.tol_scale : 0;
            std::string err = compare(got[k], want[k], tol);
            EXPECT_EQ(err, "") << describe(c, shapes, dtype, strided) << " output " << k;
          }
        }
      }
    }
  }
}

TEST(OpTable, GradientsMatchFiniteDifferences) {
  for (const OpCase& c : all_op_cases()) {
    if (!c.gradcheck) continue;
    for (const Shapes& shapes : c.shapes) {
      Inputs in = c.make_inputs ? c.make_inputs(shapes, DType::Float64)
                                : default_inputs(shapes, DType::Float64);
      std::vector<int> which = c.grad_inputs;
      if (which.empty())
        for (size_t i = 0; i < in.size(); ++i)
          if (is_floating(in[i].dtype())) which.push_back(int(i));
      bool any = false;
      for (int i : which) any |= in[i].numel() > 0;
      if (!any) continue;
      std::string err;
      try {
        err = gradcheck(c.run, in, which);
      } catch (const std::exception& e) {
        err = std::string("threw ") + e.what();
      }
      EXPECT_EQ(err, "") << describe(c, shapes, DType::Float64, false);
    }
  }
}

}  // namespace
}  // namespace ember::test
