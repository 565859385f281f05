// t[key] and t[key] = value with Python's keys: ints, slices, None, Ellipsis and tuples of
// them give views (as PyTorch's basic indexing); a bool mask or an int64 tensor / list of ints
// picks elements (a copy).
#include "common.h"

#include <string>

namespace ember::python {
namespace {

bool is_int_key(nb::handle k) {
  return PyIndex_Check(k.ptr()) && !PyBool_Check(k.ptr()) && !nb::isinstance<Tensor>(k);
}

// A list of ints as an int64 tensor (a key such as t[[0, 2]]).
Tensor int_list_key(nb::handle key) {
  std::vector<int64_t> v;
  for (nb::handle h : key) {
    if (!is_int_key(h)) throw nb::index_error("indexing with a list: only lists of ints are supported");
    v.push_back(nb::cast<int64_t>(nb::int_(h)));
  }
  return from_vector(v, {int64_t(v.size())}, DType::Int64);
}

// t[mask] (mask bool over t's leading dims) or t[index] (int tensor along dim 0).
Tensor tensor_key(const Tensor& t, Tensor key) {
  if (key.device() != t.device()) key = key.to(t.device());
  if (key.dtype() == DType::Bool) {
    const Shape& ks = key.sizes();
    bool prefix = ks.size() <= t.sizes().size();
    for (size_t d = 0; prefix && d < ks.size(); ++d) prefix = ks[d] == t.sizes()[d];
    if (!prefix)
      throw nb::index_error(("the mask's shape " + key.shape_str() +
                             " does not match the leading dims of the indexed tensor's shape " +
                             t.shape_str())
                                .c_str());
    Shape rest = {-1};
    rest.insert(rest.end(), t.sizes().begin() + int64_t(ks.size()), t.sizes().end());
    Tensor rows = nonzero(key.reshape({-1})).reshape({-1});
    return t.reshape(rest).index_select(0, rows);
  }
  if (!is_integral(key.dtype()))
    throw nb::index_error(("tensors used as indices must be bool or integer tensors, got " +
                           std::string(dtype_name(key.dtype())))
                              .c_str());
  if (t.dim() == 0) throw nb::index_error("cannot index a 0-dim tensor with a tensor");
  Shape out = key.sizes();
  out.insert(out.end(), t.sizes().begin() + 1, t.sizes().end());
  return t.index_select(0, key.to(DType::Int64).reshape({-1})).reshape(out);
}

Tensor basic_index(const Tensor& t, nb::handle key) {
  nb::tuple items = nb::isinstance<nb::tuple>(key) ? nb::borrow<nb::tuple>(key) : nb::make_tuple(key);
  int64_t specified = 0;
  bool seen_ellipsis = false;
  for (nb::handle k : items) {
    if (is_int_key(k) || PySlice_Check(k.ptr())) {
      ++specified;
    } else if (k.ptr() == Py_Ellipsis) {
      if (seen_ellipsis) throw nb::index_error("an index can only have a single ellipsis ('...')");
      seen_ellipsis = true;
    } else if (!k.is_none()) {
      throw nb::index_error(("only integers, slices, None, '...', bool/int tensors and lists of "
                             "ints are valid indices (got " +
                             std::string(nb::type_name(k.type()).c_str()) + " inside a tuple)")
                                .c_str());
    }
  }
  if (specified > t.dim())
    throw nb::index_error(("too many indices for tensor of dimension " + std::to_string(t.dim()) +
                           " (shape " + t.shape_str() + ")")
                              .c_str());
  Tensor r = t;
  int64_t d = 0;
  int64_t remaining = specified;
  for (nb::handle k : items) {
    if (k.is_none()) {
      r = r.unsqueeze(d++);
    } else if (k.ptr() == Py_Ellipsis) {
      d = r.dim() - remaining;
    } else if (is_int_key(k)) {
      int64_t i = nb::cast<int64_t>(nb::int_(k)), n = r.size(d);
      if (i < -n || i >= n)
        throw nb::index_error(("index " + std::to_string(i) + " is out of bounds for dim " +
                               std::to_string(d) + " with size " + std::to_string(n))
                                  .c_str());
      r = r.select(d, i);
      --remaining;
    } else {  // slice
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(k.ptr(), &start, &stop, &step) < 0) throw nb::python_error();
      if (step <= 0) throw nb::value_error("slice step must be positive (negative steps are not supported)");
      const int64_t n = r.size(d);
      PySlice_AdjustIndices(n, &start, &stop, step);
      if (!(start == 0 && stop == n && step == 1))
        r = r.slice(d, start, std::max(start, stop), step);
      ++d;
      --remaining;
    }
  }
  return r;
}

Tensor get_item(const Tensor& t, nb::handle key) {
  if (nb::isinstance<Tensor>(key)) return tensor_key(t, nb::cast<Tensor>(key));
  if (nb::isinstance<nb::list>(key)) return tensor_key(t, int_list_key(key));
  return basic_index(t, key);
}

void set_item(Tensor& t, nb::handle key, nb::handle value) {
  if (nb::isinstance<Tensor>(key) && nb::cast<Tensor>(key).dtype() == DType::Bool &&
      is_python_scalar(value)) {
    t.masked_fill_(nb::cast<Tensor>(key), nb::cast<double>(nb::float_(value)));
    return;
  }
  if (nb::isinstance<Tensor>(key) || nb::isinstance<nb::list>(key))
    throw nb::index_error("assigning through a tensor index is only supported for a bool mask and "
                          "a Python number (t[mask] = 0.0); use index_add / scatter_add");
  Tensor view = basic_index(t, key);
  if (is_python_scalar(value))
    view.fill_(nb::cast<double>(nb::float_(value)));
  else
    view.copy_(operand_or_throw(value, t, "__setitem__"));
}

}  // namespace

void bind_indexing(nb::class_<Tensor>& cls) {
  cls.def("__getitem__", &get_item).def("__setitem__", &set_item);
}

}  // namespace ember::python
