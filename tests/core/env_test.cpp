// env_switch (core/env.h): a switch on by default goes off only at "0", one off by default goes on
// only at "1"; unset, each is its default.
#include <gtest/gtest.h>

#include "compiler/compiler_test_util.h"
#include "core/env.h"

namespace ember::test {
namespace {

TEST(EnvSwitch, OnlyZeroTurnsOffAndOnlyOneTurnsOn) {
  const char* name = "EMBER_TEST_ENV_SWITCH";
  ::unsetenv(name);
  EXPECT_TRUE(env_switch(name, true));
  EXPECT_FALSE(env_switch(name, false));
  for (const char* v : {"0", "1", "", "yes", "00", "10"}) {
    ScopedEnv set(name, v);
    EXPECT_EQ(env_switch(name, true), std::string(v) != "0") << "'" << v << "'";
    EXPECT_EQ(env_switch(name, false), std::string(v) == "1") << "'" << v << "'";
  }
  EXPECT_EQ(std::getenv(name), nullptr);
}

}  // namespace
}  // namespace ember::test
