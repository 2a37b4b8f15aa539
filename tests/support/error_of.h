// The message of the exception `fn` throws; fails the current test when it throws nothing.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "grpo/sdk/config_view.h"

namespace grpo::testing {

template <typename Error = grpo::sdk::ConfigError, typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

}  // namespace grpo::testing
