// Values by key, each made once in the process even when several threads ask for it at once:
// an entry exists from the moment a thread starts making it, other threads asking for the same
// key wait for it, and different keys are made side by side (a training graph's forward and
// backward). A failure reaches every waiter, and the next call tries again.
#pragma once
#include <exception>
#include <future>
#include <mutex>
#include <string>
#include <unordered_map>

namespace ember::compiler {

template <class V>
class OnceCache {
 public:
  // The value of `key`, made by `make()` unless it exists or is being made (then `*hit`).
  template <class Make>
  V get(const std::string& key, Make&& make, bool* hit) {
    std::promise<V> promise;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = values_.find(key);
      *hit = it != values_.end();
      if (*hit) {
        std::shared_future<V> f = it->second;
        return f.get();  // made (or being made) by another call; rethrows its failure
      }
      values_.emplace(key, promise.get_future().share());
    }
    try {
      V v = make();
      promise.set_value(v);
      return v;
    } catch (...) {
      promise.set_exception(std::current_exception());
      std::lock_guard<std::mutex> lock(mu_);
      values_.erase(key);
      throw;
    }
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    values_.clear();
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_future<V>> values_;
};

}  // namespace ember::compiler
