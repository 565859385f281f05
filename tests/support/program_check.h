// Random programs (program_gen.h) against eager execution: a program's eager results at one
// call of its size schedule, its arguments for a compiled call, and the comparison of what the
// call returned (bit for bit for the eager backend, else within tolerances that follow the
// values' dtypes and bounds). Shared by the random-program tests.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "support/program_gen.h"

namespace ember::testgen {

// One program's data and eager results: its outputs, and for a training program its loss and
// the grads of its inputs.
struct Expected {
  std::vector<Tensor> inputs, weights, outputs, grads;
  Tensor loss;
  std::vector<bool> f32;
};
// The eager results of p at call `at` of its schedule (0 for a program of fixed sizes).
Expected expected(const Program& p, size_t at = 0);

// A program's part of a compiled call: its arguments (for a training program fresh leaves, whose
// grads the backward fills), and its part of the results.
struct Call {
  std::vector<Tensor> args, leaves;
};
Call call_args(const Program& p, const Expected& e, size_t at = 0);
// The program over a compiled call's arguments: its outputs, then a training program's loss.
std::vector<Tensor> run_part(const Program& p, const std::vector<Tensor>& args);

// Checks program p's results `got` (outputs, then a training program's loss) against e; the
// loss's backward must have run. Empty when they agree, else the first difference.
std::string check_results(const Program& p, const Expected& e, const Call& c,
                          const std::vector<Tensor>& got, bool eager_backend);

// Many programs as one function, so that one compiled function (one C++ build) checks them
// all: its arguments are each program's in turn (inputs, then a training program's loss
// weights), its results each program's outputs and loss.
using ProgramsFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
ProgramsFn batch_function(const std::vector<Program>& ps, const std::vector<Expected>& es);
// Calls f (a batch_function of ps, compiled or not) with each program's arguments at call `at`
// of its schedule, runs the training programs' losses backward together, and checks every
// program against its expected results es (computed at `at`). Empty when all agree, else the
// first difference, naming the program's seed.
std::string call_and_check(const ProgramsFn& f, const std::vector<Program>& ps,
                           const std::vector<Expected>& es, size_t at, bool eager_backend);
// The random programs of seeds [first, first + count) (generate_program) as one batch
// function compiled with `backend` (one that gives eager's results), called once and checked
// (call_and_check at call 0). Empty when all agree.
std::string check_programs_through(const std::string& backend, uint64_t first, uint64_t count);

}  // namespace ember::testgen
