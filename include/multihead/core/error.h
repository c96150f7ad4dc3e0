// SPDX-License-Identifier: Apache-2.0
// Typed errors. The library throws these and never exits or aborts; the CLI
// turns any of them into one line on stderr and exit code 2.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace multihead {

// Base of every error the library raises on bad input.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Tensor shapes or sizes that do not fit together.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A configuration value that is missing, mistyped or out of range.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A file that cannot be read, written or parsed.
class IoError : public Error {
 public:
  using Error::Error;
};

// Memory the system cannot give (an allocation refused, or a model larger
// than the machine's memory).
class MemoryError : public Error {
 public:
  using Error::Error;
};

// Size limits of a model's settings, checked before anything is allocated:
// far beyond any model this CPU library trains, small enough that no size
// product computed from them overflows.
inline constexpr std::int64_t kMaxWidth = 1 << 16;        // d_model, embed_dim, kdim, vdim, heads
inline constexpr std::int64_t kMaxFeedforward = 1 << 20;  // dim_feedforward
inline constexpr std::int64_t kMaxLayers = 1024;
inline constexpr std::int64_t kMaxVocab = 1 << 24;   // vocabularies and classes
inline constexpr std::int64_t kMaxLength = 1 << 20;  // positions

// Text from outside (a key, a name) as an error message quotes it: at most
// `max` bytes, a longer one cut with its length noted, so that one line stays
// one readable line whatever a client sends.
inline std::string clip_text(std::string_view s, std::size_t max = 64) {
  if (s.size() <= max) return std::string(s);
  return fmt::format("{}... ({} bytes)", s.substr(0, max), s.size());
}

// Throws E with a fmt-formatted message when `cond` is false.
template <typename E = Error, typename... Args>
inline void check(bool cond, fmt::format_string<Args...> f, Args&&... args) {
  if (!cond) throw E(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace multihead
