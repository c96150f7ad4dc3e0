// SPDX-License-Identifier: Apache-2.0
#include "multihead/train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace multihead {
namespace {

std::string clock_text(double seconds) {
  const long s = std::lround(seconds);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
                   : fmt::format("{:02}:{:02}", s / 60, s % 60);
}

}  // namespace

Progress::Progress(std::int64_t total_steps, std::FILE* out, bool quiet, std::int64_t log_every)
    : total_(total_steps),
      out_(out),
      quiet_(quiet),
      warnings_(!quiet),
      tty_(out != nullptr && ::isatty(::fileno(out)) != 0),
      log_every_(log_every),
      start_(std::chrono::steady_clock::now()),
      last_line_(start_) {}

void Progress::update(std::int64_t step, std::int64_t epoch, double loss, double items_per_s, const char* unit,
                      const std::string& extra) {
  if (quiet_) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (paced_step_ < 0) paced_step_ = step, paced_from_ = now;
  // The pace of the steps after the first (the first's alone until there are some).
  const double paced = std::chrono::duration<double>(now - paced_from_).count();
  const double per_step = step > paced_step_ ? paced / static_cast<double>(step - paced_step_)
                          : step > first_    ? elapsed / static_cast<double>(step - first_)
                                             : 0.0;
  const double eta = per_step * static_cast<double>(std::max<std::int64_t>(total_ - step, 0));
  if (tty_) {
    constexpr int kWidth = 28;
    const int filled = total_ > 0 ? static_cast<int>(kWidth * step / total_) : kWidth;
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.resize(kWidth, '.');
    fmt::print(out_, "\r[{}] step {}/{} epoch {} loss {:.4f} {:.0f} {} ETA {}   ", bar, step, total_, epoch, loss,
               items_per_s, unit, clock_text(eta));
    std::fflush(out_);
    bar_shown_ = true;
  } else if (step == first_ + 1 || step % log_every_ == 0 || step == total_ ||
             now - last_line_ >= std::chrono::seconds(10)) {
    last_line_ = now;
    fmt::print(out_, "step {}/{} epoch {} loss {:.4f} {:.0f} {} elapsed {} eta {}{}{}\n", step, total_, epoch, loss,
               items_per_s, unit, clock_text(elapsed), clock_text(eta), extra.empty() ? "" : "; ", extra);
    std::fflush(out_);
  }
}

void Progress::resume_at(std::int64_t step) {
  first_ = step;
  start_ = last_line_ = std::chrono::steady_clock::now();
  paced_step_ = -1;
  if (step > 0) log(fmt::format("resumed at step {}", step));
}

void Progress::log(const std::string& line) {
  if (quiet_) return;
  if (bar_shown_) fmt::print(out_, "\r\x1b[2K");
  bar_shown_ = false;
  fmt::print(out_, "{}\n", line);
  std::fflush(out_);
}

void Progress::warn(const std::string& line) {
  if (!warnings_ || !out_) return;
  if (bar_shown_) fmt::print(out_, "\r\x1b[2K");
  bar_shown_ = false;
  fmt::print(out_, "warning: {}\n", line);
  std::fflush(out_);
}

void Progress::finish() {
  if (quiet_) return;
  if (bar_shown_) fmt::print(out_, "\n");
  bar_shown_ = false;
  std::fflush(out_);
}

}  // namespace multihead
