// expect_error: runs f and checks it throws an ember::Error whose message contains every
// given fragment (the op name, the bad value ...).
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ember/error.h"

namespace ember::test {

template <class F>
void expect_error(F f, const std::vector<std::string>& fragments) {
  try {
    f();
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const std::string& p : fragments) EXPECT_NE(msg.find(p), std::string::npos) << msg;
    return;
  }
  ADD_FAILURE() << "no ember::Error; expected one mentioning '" << fragments.at(0) << "'";
}

template <class F>
void expect_error(F f, const char* fragment) {
  expect_error(f, std::vector<std::string>{fragment});
}

}  // namespace ember::test
