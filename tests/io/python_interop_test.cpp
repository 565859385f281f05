// Interoperability with the reference implementation: Python's `safetensors` package (with
// numpy) reads what ember writes and ember reads what it writes. These tests need python3 with
// `pip install safetensors numpy` and fail, saying so, when either is missing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>

#include "ember/io.h"
#include "io/io_test_util.h"

namespace ember::test {
namespace {

struct ProcessResult {
  int exit_code = -1;  // -1: did not exit normally
  std::string output;  // stdout and stderr together
};

// Runs argv[0] found on PATH with the arguments as given (no shell), capturing its output.
ProcessResult run_process(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe(fds) != 0) return {-1, "pipe failed"};
  pid_t pid = fork();
  if (pid < 0) return {-1, "fork failed"};
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::string msg = "cannot run " + argv[0] + ": " + std::strerror(errno) + "\n";
    (void)!write(2, msg.data(), msg.size());
    _exit(127);
  }
  close(fds[1]);
  ProcessResult r;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    r.output.append(buf, size_t(n));
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

ProcessResult run_python(const std::string& script, const std::string& arg) {
  return run_process({"python3", "-c", script, arg});
}

::testing::AssertionResult python_with_safetensors() {
  ProcessResult r =
      run_python("import sys, numpy, safetensors; print(safetensors.__version__)", "");
  if (r.exit_code == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "these tests need python3 with the safetensors and numpy packages "
            "(pip install safetensors numpy); running python3 said:\n"
         << r.output;
}

// The values both sides agree on: element i (row-major) of each test tensor.
double expected_value(DType t, int64_t i) {
  switch (t) {
    case DType::Float64:
      return double(i) * 0.25 - 3.0;
    case DType::Float32:
      return double(i) * 0.5 - 1.0;
    case DType::Float16:
      return double(i) * 0.5 - 1.0;
    case DType::BFloat16:
      return double(i) - 4.0;
    case DType::Int64:
      return double((i - 3) * (int64_t(1) << 40));
    case DType::Int32:
      return double(i * 1000 - 2);
    case DType::Bool:
      return i % 3 == 0 ? 1.0 : 0.0;
  }
  return 0;
}
// The same table for the Python side.
const char* kPythonValues = R"(
import numpy as np
def expected(dtype, n):
    i = np.arange(n, dtype=np.int64)
    return {
        'F64': i * 0.25 - 3.0, 'F32': i * 0.5 - 1.0, 'F16': i * 0.5 - 1.0, 'BF16': i - 4.0,
        'I64': (i - 3) * (1 << 40), 'I32': i * 1000 - 2, 'BOOL': i % 3 == 0,
    }[dtype]
NP = {'F64': '<f8', 'F32': '<f4', 'F16': '<f2', 'I64': '<i8', 'I32': '<i4', 'BOOL': '?'}
def as_numpy(info):
    raw = bytes(info['data'])
    if info['dtype'] == 'BF16':  # numpy has no bfloat16: widen the bits to float32
        return (np.frombuffer(raw, dtype='<u2').astype('<u4') << 16).view('<f4')
    return np.frombuffer(raw, dtype=NP[info['dtype']])
)";

template <class T>
void fill_values(Tensor& t, int64_t n, const std::vector<int64_t>& order = {}) {
  T* p = static_cast<T*>(t.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = order.empty() ? i : order[size_t(i)];
    const double v = expected_value(t.dtype(), i);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      p[at] = T(float(v));
    } else {
      p[at] = T(v);
    }
  }
}

Tensor value_tensor(DType dtype, const Shape& shape) {
  Tensor t = make_tensor(shape, dtype);
  const int64_t n = t.numel();
  switch (dtype) {
    case DType::Float64:
      fill_values<double>(t, n);
      break;
    case DType::Float32:
      fill_values<float>(t, n);
      break;
    case DType::Float16:
      fill_values<Half>(t, n);
      break;
    case DType::BFloat16:
      fill_values<BFloat16>(t, n);
      break;
    case DType::Int64:
      fill_values<int64_t>(t, n);
      break;
    case DType::Int32:
      fill_values<int32_t>(t, n);
      break;
    case DType::Bool:
      fill_values<bool>(t, n);
      break;
  }
  return t;
}

double element(const Tensor& t, int64_t i) {
  const void* p = t.data_ptr();
  switch (t.dtype()) {
    case DType::Float64:
      return static_cast<const double*>(p)[i];
    case DType::Float32:
      return static_cast<const float*>(p)[i];
    case DType::Float16:
      return float(static_cast<const Half*>(p)[i]);
    case DType::BFloat16:
      return float(static_cast<const BFloat16*>(p)[i]);
    case DType::Int64:
      return double(static_cast<const int64_t*>(p)[i]);
    case DType::Int32:
      return static_cast<const int32_t*>(p)[i];
    case DType::Bool:
      return static_cast<const bool*>(p)[i] ? 1.0 : 0.0;
  }
  return NAN;
}

TEST(PythonInterop, PythonAndSafetensorsAreInstalled) {
  ASSERT_TRUE(python_with_safetensors());
}

TEST(PythonInterop, PythonReadsEmberCheckpoints) {
  ASSERT_TRUE(python_with_safetensors());
  TempDir dir;
  io::Checkpoint ck;
  // A [3, 4] float32 tensor saved from a transposed view: Python must see logical order.
  Tensor base = make_tensor({4, 3}, DType::Float32);
  std::vector<int64_t> transposed_order;
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 4; ++c) transposed_order.push_back(c * 3 + r);
  }
  fill_values<float>(base, 12, transposed_order);
  ck.model = {{"f64", value_tensor(DType::Float64, {2, 3})},
              {"f32_t", base.t()},
              {"f16", value_tensor(DType::Float16, {5})},
              {"bf16", value_tensor(DType::BFloat16, {2, 2})},
              {"i64", value_tensor(DType::Int64, {4})},
              {"i32_scalar", value_tensor(DType::Int32, {})},
              {"mask", value_tensor(DType::Bool, {7})},
              {"empty", value_tensor(DType::Float32, {0, 3})}};
  ck.optimizer = {{"step", value_tensor(DType::Int64, {})}};
  ck.step = 42;
  ck.config = R"({"n_layer": 2, "name": "tiny"})";
  ck.rng = {UINT64_MAX, 12345};
  ck.extra = {{"note", "héllo"}};
  const std::string path = dir.file("ckpt.safetensors");
  io::save_checkpoint(path, ck);

  const std::string script = std::string(kPythonValues) + R"(
import sys, json
from safetensors import safe_open, deserialize
path = sys.argv[1]
items = dict(deserialize(open(path, 'rb').read()))
want = {
    'model.f64': ('F64', [2, 3]), 'model.f32_t': ('F32', [3, 4]), 'model.f16': ('F16', [5]),
    'model.bf16': ('BF16', [2, 2]), 'model.i64': ('I64', [4]), 'model.i32_scalar': ('I32', []),
    'model.mask': ('BOOL', [7]), 'model.empty': ('F32', [0, 3]), 'optim.step': ('I64', []),
}
assert sorted(items) == sorted(want), sorted(items)
for name, (dtype, shape) in want.items():
    info = items[name]
    assert info['dtype'] == dtype, (name, info['dtype'])
    assert list(info['shape']) == shape, (name, info['shape'])
    got = as_numpy(info)
    n = int(np.prod(shape)) if shape else 1
    assert np.array_equal(got, expected(dtype, n).astype(got.dtype)), (name, got)
with safe_open(path, framework='numpy') as f:
    for name, (dtype, shape) in want.items():
        if dtype == 'BF16':
            continue
        arr = f.get_tensor(name)
        assert arr.shape == tuple(shape), (name, arr.shape)
        assert arr.dtype == np.dtype(NP[dtype]), (name, arr.dtype)
        n = int(np.prod(shape)) if shape else 1
        assert np.array_equal(arr.reshape(-1), expected(dtype, n).astype(arr.dtype)), name
    meta = f.metadata()
assert meta['format'] == 'ember-checkpoint/1', meta
assert meta['step'] == '42', meta
assert json.loads(meta['config']) == {'n_layer': 2, 'name': 'tiny'}, meta
assert meta['rng_seed'] == str(2**64 - 1) and meta['rng_offset'] == '12345', meta
assert meta['note'] == 'h\u00e9llo', meta
print('python read', len(items), 'tensors')
)";
  ProcessResult r = run_python(script, path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("python read 9 tensors"), std::string::npos) << r.output;
}

TEST(PythonInterop, EmberReadsPythonFiles) {
  ASSERT_TRUE(python_with_safetensors());
  TempDir dir;
  const std::string path = dir.file("from_python.safetensors");
  const std::string script = std::string(kPythonValues) + R"(
import sys
import safetensors
from safetensors.numpy import save_file
path = sys.argv[1]
def make(dtype, shape):
    n = int(np.prod(shape)) if shape else 1
    return expected(dtype, n).astype(NP[dtype]).reshape(shape).copy()  # C order, 0-dim kept
tensors = {
    'f64': make('F64', [2, 3]), 'f32': make('F32', [3, 4]), 'f16': make('F16', [5]),
    'i64': make('I64', [4]), 'i32': make('I32', []), 'mask': make('BOOL', [7]),
    'empty': make('F32', [0, 3]),
}
save_file(tensors, path, metadata={'source': 'numpy', 'step': '7'})
# bfloat16 has no numpy dtype: write its bits through the package's raw serializer.
bits = (expected('BF16', 4).astype('<f4').view('<u4') >> 16).astype('<u2')
raw = {'bf16': safetensors.TensorSpec(dtype='bfloat16', shape=[2, 2],
                                      data_ptr=bits.ctypes.data, data_len=bits.nbytes)}
safetensors.serialize_file(raw, path + '.bf16', metadata=None)
print('python wrote')
)";
  ProcessResult r = run_python(script, path);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  io::TensorFile f = io::load_safetensors(path);
  EXPECT_EQ(f.metadata, (io::Metadata{{"source", "numpy"}, {"step", "7"}}));
  const std::vector<std::tuple<std::string, DType, Shape>> want = {
      {"f64", DType::Float64, {2, 3}},  {"f32", DType::Float32, {3, 4}},
      {"f16", DType::Float16, {5}},     {"i64", DType::Int64, {4}},
      {"i32", DType::Int32, {}},        {"mask", DType::Bool, {7}},
      {"empty", DType::Float32, {0, 3}}};
  EXPECT_EQ(f.tensors.size(), want.size());
  for (const auto& [name, dtype, shape] : want) {
    ASSERT_TRUE(f.contains(name)) << name;
    const Tensor& t = f.at(name);
    EXPECT_EQ(t.dtype(), dtype) << name;
    EXPECT_EQ(t.sizes(), shape) << name;
    for (int64_t i = 0; i < t.numel(); ++i) {
      EXPECT_EQ(element(t, i), expected_value(dtype, i)) << name << "[" << i << "]";
    }
  }
  io::TensorFile bf = io::load_safetensors(path + ".bf16");
  const Tensor& b = bf.at("bf16");
  EXPECT_EQ(b.dtype(), DType::BFloat16);
  EXPECT_EQ(b.sizes(), (Shape{2, 2}));
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(element(b, i), expected_value(DType::BFloat16, i));
}

TEST(PythonInterop, PythonRejectsNothingEmberWrites) {
  // Edge cases of the writer (no tensors, no metadata, only empty tensors, odd alignment) all
  // pass the reference reader's own validation.
  ASSERT_TRUE(python_with_safetensors());
  TempDir dir;
  const std::vector<io::NamedTensors> files = {{},
                                               {{"e", make_tensor({0}, DType::Float64)}},
                                               {{"b", value_tensor(DType::Bool, {3})},
                                                {"d", value_tensor(DType::Float64, {1})},
                                                {"h", value_tensor(DType::Float16, {1})}}};
  const std::string script = R"(
import sys
from safetensors import deserialize
for p in sys.argv[1].split(','):
    deserialize(open(p, 'rb').read())
print('all valid')
)";
  std::string paths;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string p = dir.file("f" + std::to_string(i));
    io::save_safetensors(p, files[i]);
    paths += (i ? "," : "") + p;
  }
  ProcessResult r = run_python(script, paths);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("all valid"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ember::test
