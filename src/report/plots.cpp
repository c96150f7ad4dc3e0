// SPDX-License-Identifier: Apache-2.0
#include "multihead/report/plots.h"

#include <cairo.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <new>

#include <fmt/format.h>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"

namespace multihead {
namespace {

// Colours of the series, in order (a colour-blind-safe palette).
constexpr double kPalette[][3] = {{0.0, 0.45, 0.70},  {0.90, 0.62, 0.0},  {0.0, 0.62, 0.45},
                                  {0.80, 0.47, 0.65}, {0.34, 0.71, 0.91}, {0.84, 0.37, 0.0}};

cairo_status_t append_png(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

// The surface as PNG bytes (it is destroyed); `what` names it in errors.
std::string encode(cairo_surface_t* surface, const std::string& what) {
  std::string bytes;
  const cairo_status_t st = cairo_surface_write_to_png_stream(surface, append_png, &bytes);
  cairo_surface_destroy(surface);
  check<IoError>(st == CAIRO_STATUS_SUCCESS, "cannot encode PNG '{}': {}", what, cairo_status_to_string(st));
  return bytes;
}

// A W x H picture, white, in the plots' font: draw on cr, then destroy cr and
// save or encode the surface.
struct Canvas {
  cairo_surface_t* surface;
  cairo_t* cr;
};
Canvas white_canvas(int W, int H) {
  Canvas c{cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H), nullptr};
  c.cr = cairo_create(c.surface);
  cairo_select_font_face(c.cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_source_rgb(c.cr, 1, 1, 1);
  cairo_paint(c.cr);
  return c;
}

// Renders into memory, then writes the file atomically.
void save(cairo_surface_t* surface, const std::string& path) { write_file_atomic(path, encode(surface, path)); }

void text_at(cairo_t* cr, double x, double y, const std::string& s, double size, double align_x = 0.0,
             double angle = 0.0) {
  cairo_save(cr);
  cairo_set_font_size(cr, size);
  cairo_text_extents_t ext;
  cairo_text_extents(cr, s.c_str(), &ext);
  cairo_translate(cr, x, y);
  cairo_rotate(cr, angle);
  cairo_move_to(cr, -ext.x_advance * align_x, ext.height / 2);
  cairo_show_text(cr, s.c_str());
  cairo_restore(cr);
}

// The decimals `step` needs after its scaling by 10^-exponent (0.25: 2).
int step_decimals(double step, int exponent) {
  int decimals = 0;
  while (decimals < 6) {
    const double scaled = step * std::pow(10.0, decimals - exponent);
    if (std::fabs(scaled - std::round(scaled)) < 1e-6 * scaled) break;
    ++decimals;
  }
  return decimals;
}

// Shortens a label to n characters (whole UTF-8 sequences) for axis text.
std::string shorten(const std::string& s, std::size_t n) {
  std::string out;
  std::size_t chars = 0;
  for (std::size_t i = 0; i < s.size() && chars < n; ++chars) {
    std::size_t len = 1;
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0xF0) len = 4;
    else if (c >= 0xE0) len = 3;
    else if (c >= 0xC0) len = 2;
    out.append(s, i, len);
    i += len;
  }
  return out;
}

}  // namespace

double nice_tick_step(double range, int intervals) {
  const double raw = range / intervals, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0})
    if (raw <= m * mag) return m * mag;
  return 10.0 * mag;
}

std::vector<double> smoothed(const std::vector<double>& y, double weight) {
  std::vector<double> out(y.size(), std::numeric_limits<double>::quiet_NaN());
  double s = 0, norm = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) continue;
    s = weight * s + (1 - weight) * y[i];
    norm = weight * norm + (1 - weight);
    out[i] = s / norm;
  }
  return out;
}

double smoothing_weight(std::size_t n) {
  const double lag = static_cast<double>(n) / 100;
  return std::clamp(lag / (1 + lag), 0.6, 0.98);
}

namespace {

// A point as the axes place it (log axes take the logarithm), or NaN.
struct Transform {
  bool log_x, log_y;
  double x(double v) const { return log_x ? (v > 0 ? std::log2(v) : std::nan("")) : v; }
  double y(double v) const { return log_y ? (v > 0 ? std::log10(v) : std::nan("")) : v; }
};

// A log axis's tick label: the value itself (2^k or 10^k).
std::string log_tick_label(double exponent, double base) {
  const double v = std::pow(base, exponent);
  if (base == 2 && exponent >= 0 && exponent < 20) return fmt::format("{:.0f}", v);
  if (v >= 1e-3 && v < 1e6) return fmt::format("{:g}", v);
  return fmt::format("{:.0e}", v);
}

void draw_marker(cairo_t* cr, double x, double y) {
  cairo_new_sub_path(cr);
  cairo_arc(cr, x, y, 3.5, 0, 2 * M_PI);
  cairo_fill(cr);
}

}  // namespace

std::string tick_label(double v, double step) {
  char buf[32];
  const double a = std::fabs(v);
  if (v == 0) return "0";
  if (step < 1e-3 || a >= 1e6) {
    // As many digits of the mantissa as tell this tick from the next (a step
    // of 2.5e-4: 1.25e-03, not 1.3e-03).
    const int exponent = static_cast<int>(std::floor(std::log10(a)));
    const int step_exponent = static_cast<int>(std::floor(std::log10(step)));
    const int digits = std::clamp(exponent - step_exponent + step_decimals(step, step_exponent), 0, 6);
    std::snprintf(buf, sizeof buf, "%.*e", digits, v);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%.*f", step_decimals(step, 0), v);
  return buf;
}

void line_plot_png(const std::string& path, const std::string& title, const std::string& x_label,
                   const std::string& y_label, const std::vector<Series>& series, const PlotAxes& axes) {
  const int W = 800, H = 480;
  const double left = 80, right = 20, top = 50, bottom = 60;
  // Named variables, not a structured binding: the drawing lambdas below capture them (clang 14,
  // the fuzzing build's compiler, takes no binding into a lambda).
  const Canvas canvas = white_canvas(W, H);
  cairo_surface_t* const surface = canvas.surface;
  cairo_t* const cr = canvas.cr;

  const Transform tf{axes.log_x, axes.log_y};
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : series)
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      const double x = tf.x(s.x[i]), e = i < s.err.size() && std::isfinite(s.err[i]) ? s.err[i] : 0;
      const double lo = tf.y(s.y[i] - e), hi = tf.y(s.y[i] + e), mid = tf.y(s.y[i]);
      if (!std::isfinite(mid) || !std::isfinite(x)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x);
      y0 = std::min({y0, mid, std::isfinite(lo) ? lo : mid}), y1 = std::max({y1, mid, std::isfinite(hi) ? hi : mid});
    }
  // A range within rounding of a point (a value and its smoothed twin an ulp
  // apart) is a point: its tick step would be below the values' precision.
  const auto point_like = [](double lo, double hi) {
    return !(lo < hi) || hi - lo <= 1e-9 * std::max(std::fabs(lo), std::fabs(hi));
  };
  if (point_like(x0, x1)) x0 = std::isfinite(x0) ? x0 - 1 : 0, x1 = x0 + 2;  // one point: in the middle
  if (point_like(y0, y1)) {
    y0 = std::isfinite(y0) ? y0 - 0.5 : 0, y1 = y0 + 1;
    if (axes.y_floor && axes.y_ceiling) y0 = *axes.y_floor, y1 = *axes.y_ceiling;  // all of a bounded range
  }
  double ystep = 1;
  if (axes.log_y) {
    y0 = std::floor(y0), y1 = std::max(std::ceil(y1), y0 + 1);
  } else {
    // y: a little room around the data, then out to whole tick steps; a
    // quantity that is never negative (a loss, bytes) keeps 0 as its floor.
    const bool non_negative = y0 >= 0;
    const double pad = 0.03 * (y1 - y0);
    y0 -= pad, y1 += pad;
    if (non_negative) y0 = std::max(y0, 0.0);
    if (axes.y_min) y0 = *axes.y_min;
    if (axes.y_max) y1 = *axes.y_max;
    if (!(y0 < y1)) y1 = y0 + 1;
    ystep = nice_tick_step(y1 - y0, 5);
    if (!axes.y_min) y0 = std::floor(y0 / ystep) * ystep;
    if (!axes.y_max) y1 = std::ceil(y1 / ystep) * ystep;
    if (axes.y_floor) y0 = std::max(y0, *axes.y_floor);
    if (axes.y_ceiling) y1 = std::min(y1, *axes.y_ceiling);
    if (!(y0 < y1)) y0 = axes.y_floor.value_or(y1 - 1), y1 = axes.y_ceiling.value_or(y0 + 1);
  }
  double xstep = axes.log_x ? std::max(1.0, std::ceil((x1 - x0) / 8)) : nice_tick_step(x1 - x0, 8);
  if (axes.log_x) {  // a little room so that the end points' markers show whole
    const double pad = 0.04 * (x1 - x0);
    x0 -= pad, x1 += pad;
  }
  const double pw = W - left - right, ph = H - top - bottom;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return top + (1 - (y - y0) / (y1 - y0)) * ph; };

  cairo_set_source_rgb(cr, 0, 0, 0);
  text_at(cr, W / 2.0, 22, title, 17, 0.5);
  text_at(cr, left + pw / 2, H - 18, x_label + (axes.log_x ? " (log scale)" : ""), 13, 0.5);
  text_at(cr, 22, top + ph / 2, y_label + (axes.log_y ? " (log scale)" : ""), 13, 0.5, -M_PI / 2);
  // Grid and ticks at whole multiples of the steps (the x axis keeps the
  // data's own ends: its first tick is the first multiple inside them).
  cairo_set_line_width(cr, 1);
  auto grid_line = [&](double ax, double ay, double bx, double by) {
    cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
    cairo_move_to(cr, ax, ay);
    cairo_line_to(cr, bx, by);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
  };
  // Ticks by index, never by a running sum that a tiny step would leave unchanged.
  const double yfirst = std::ceil(y0 / ystep - 1e-9) * ystep, xfirst = std::ceil(x0 / xstep) * xstep;
  for (int i = 0; i < 1000; ++i) {
    const double yv = yfirst + i * ystep;
    if (yv > y1 + 1e-9 * ystep) break;
    const double v = std::fabs(yv) < 1e-9 * ystep ? 0.0 : yv;  // no "-0" or 1e-17 from the sum
    grid_line(left, py(v), left + pw, py(v));
    text_at(cr, left - 6, py(v), axes.log_y ? log_tick_label(v, 10) : tick_label(v, ystep), 11, 1.0);
  }
  for (int i = 0; i < 1000; ++i) {
    const double xv = xfirst + i * xstep;
    if (xv > x1 + 1e-9 * xstep) break;
    const double v = std::fabs(xv) < 1e-9 * xstep ? 0.0 : xv;
    grid_line(px(v), top, px(v), top + ph);
    text_at(cr, px(v), top + ph + 14, axes.log_x ? log_tick_label(v, 2) : tick_label(v, xstep), 11, 0.5);
  }
  cairo_set_source_rgb(cr, 0, 0, 0);
  cairo_rectangle(cr, left, top, pw, ph);
  cairo_stroke(cr);
  // Series inside the frame (fixed axes clip), faint ones first.
  cairo_save(cr);
  cairo_rectangle(cr, left, top, pw, ph);
  cairo_clip(cr);
  std::vector<std::pair<double, double>> points;  // every point drawn, for the legend's placement
  // Series with error bars at the same x would hide each other's bars: each
  // is drawn a few pixels aside of the next ("dodged").
  std::vector<double> dodge(series.size(), 0.0);
  {
    std::vector<std::size_t> with_bars;
    for (std::size_t k = 0; k < series.size(); ++k)
      if (!series[k].err.empty()) with_bars.push_back(k);
    for (std::size_t j = 0; j < with_bars.size() && with_bars.size() > 1; ++j)
      dodge[with_bars[j]] = (static_cast<double>(j) - static_cast<double>(with_bars.size() - 1) / 2) * 5;
  }
  for (int pass = 0; pass < 2; ++pass)
    for (std::size_t k = 0; k < series.size(); ++k) {
      const auto& s = series[k];
      if (s.faint != (pass == 0)) continue;
      const auto sx = [&, dx = dodge[k]](double x) { return px(x) + dx; };
      const auto& c = kPalette[k % std::size(kPalette)];
      if (s.faint) cairo_set_source_rgba(cr, c[0], c[1], c[2], 0.3);
      else cairo_set_source_rgb(cr, c[0], c[1], c[2]);
      cairo_set_line_width(cr, s.faint ? 1 : 2);
      if (s.dashed) {
        const double dash[] = {6, 4};
        cairo_set_dash(cr, dash, 2, 0);
      }
      bool started = false;
      std::size_t drawn = 0;
      for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
        const double x = tf.x(s.x[i]), y = tf.y(s.y[i]);
        if (!std::isfinite(y) || !std::isfinite(x)) continue;
        if (!started) {
          cairo_move_to(cr, sx(x), py(y));
        } else {
          cairo_line_to(cr, sx(x), py(y));
          // The segment too, every 4 px, so that no legend is put over a line between points.
          const auto [ax, ay] = points.back();
          const double steps = std::floor(std::hypot(sx(x) - ax, py(y) - ay) / 4);
          for (double t = 1; t < steps; ++t)
            points.emplace_back(ax + (sx(x) - ax) * t / steps, ay + (py(y) - ay) * t / steps);
        }
        started = true;
        ++drawn;
        points.emplace_back(sx(x), py(y));
      }
      cairo_stroke(cr);
      cairo_set_dash(cr, nullptr, 0, 0);
      // Error bars, and a marker at each point of a sparse series.
      cairo_set_line_width(cr, 1.5);
      for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
        const double x = tf.x(s.x[i]), y = tf.y(s.y[i]);
        if (!std::isfinite(y) || !std::isfinite(x)) continue;
        if (i < s.err.size() && std::isfinite(s.err[i]) && s.err[i] > 0) {
          const double lo = tf.y(s.y[i] - s.err[i]), hi = tf.y(s.y[i] + s.err[i]);
          const double ylo = std::isfinite(lo) ? py(lo) : top + ph, yhi = py(hi);
          cairo_move_to(cr, sx(x), ylo);
          cairo_line_to(cr, sx(x), yhi);
          for (double yy : {ylo, yhi}) {
            cairo_move_to(cr, sx(x) - 4, yy);
            cairo_line_to(cr, sx(x) + 4, yy);
          }
          cairo_stroke(cr);
          points.emplace_back(sx(x), ylo), points.emplace_back(sx(x), yhi);
        }
        if (!s.faint && !s.dashed && drawn <= kMarkersUpTo) draw_marker(cr, sx(x), py(y));
        if (i < s.labels.size() && !s.labels[i].empty()) {
          // Right of the point and above it, unless that would run past the plot's right edge or
          // top: then to its left, or below it.
          cairo_set_font_size(cr, 10);
          cairo_text_extents_t ext;
          cairo_text_extents(cr, s.labels[i].c_str(), &ext);
          const bool to_left = sx(x) + 6 + ext.x_advance > left + pw - 2;
          const double ly = py(y) - 9 - 6 < top ? py(y) + 11 : py(y) - 9;
          text_at(cr, to_left ? sx(x) - 6 : sx(x) + 6, ly, s.labels[i], 10, to_left ? 1.0 : 0.0);
          points.emplace_back(to_left ? sx(x) - 12 : sx(x) + 12, ly);
        }
      }
    }
  cairo_restore(cr);
  if (!series.empty()) {
    cairo_set_font_size(cr, 12);
    double text_w = 0;
    for (const auto& s : series) {
      cairo_text_extents_t ext;
      cairo_text_extents(cr, s.name.c_str(), &ext);
      text_w = std::max(text_w, ext.x_advance);
    }
    const double row = 18, box_w = 8 + 25 + 7 + text_w + 8, box_h = row * static_cast<double>(series.size()) + 8;
    // Where the box covers the fewest points: down the right edge, then the
    // left, then the middle, in steps of 10 px from the top (ties: the first).
    const double xs[3] = {left + pw - box_w - 8, left + 8, left + (pw - box_w) / 2};
    double bx = xs[0], by = top + 8;
    std::size_t best_covered = std::numeric_limits<std::size_t>::max();
    for (const double cx : xs)
      for (double cy = top + 8; cy <= top + ph - box_h - 8; cy += 10) {
        const auto covered = static_cast<std::size_t>(std::count_if(points.begin(), points.end(), [&](const auto& p) {
          return p.first >= cx - 6 && p.first <= cx + box_w + 6 && p.second >= cy - 6 && p.second <= cy + box_h + 6;
        }));
        if (covered < best_covered) bx = cx, by = cy, best_covered = covered;
      }
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, bx, by, box_w, box_h);
    cairo_set_source_rgba(cr, 1, 1, 1, 0.88);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.7, 0.7, 0.7);
    cairo_stroke(cr);
    for (std::size_t k = 0; k < series.size(); ++k) {
      const auto& c = kPalette[k % std::size(kPalette)];
      const double ly = by + 4 + row / 2 + row * static_cast<double>(k);
      if (series[k].faint) cairo_set_source_rgba(cr, c[0], c[1], c[2], 0.4);
      else cairo_set_source_rgb(cr, c[0], c[1], c[2]);
      cairo_set_line_width(cr, series[k].faint ? 1 : 2);
      if (series[k].dashed) {
        const double dash[] = {6, 4};
        cairo_set_dash(cr, dash, 2, 0);
      }
      cairo_move_to(cr, bx + 8, ly);
      cairo_line_to(cr, bx + 33, ly);
      cairo_stroke(cr);
      cairo_set_dash(cr, nullptr, 0, 0);
      cairo_set_source_rgb(cr, 0, 0, 0);
      text_at(cr, bx + 40, ly, series[k].name, 12);
    }
  }
  cairo_destroy(cr);
  save(surface, path);
}

void count_matrix_png(const std::string& path, const std::string& title, const std::vector<std::int64_t>& counts,
                      std::int64_t rows, std::int64_t cols, const std::vector<std::string>& row_labels,
                      const std::vector<std::string>& col_labels, const std::string& row_axis,
                      const std::string& col_axis) {
  check<ShapeError>(static_cast<std::int64_t>(counts.size()) == rows * cols && rows > 0 && cols > 0,
                    "a {} x {} matrix needs {} counts, got {}", rows, cols, rows * cols, counts.size());
  const double cell = std::clamp(560.0 / static_cast<double>(std::max(rows, cols)), 14.0, 90.0);
  const double ls = std::min(12.0, std::max(8.0, cell * 0.35));  // label font size
  // Room above the matrix for the column labels, written upwards: as tall as the longest.
  double label_h = 0;
  {
    auto [probe, pc] = white_canvas(1, 1);
    cairo_set_font_size(pc, ls);
    for (const std::string& l : col_labels) {
      cairo_text_extents_t ext;
      cairo_text_extents(pc, shorten(l, 16).c_str(), &ext);
      label_h = std::max(label_h, ext.x_advance);
    }
    cairo_destroy(pc);
    cairo_surface_destroy(probe);
  }
  const double label_w = 150, top = 66 + label_h;
  const int W = std::max(420, static_cast<int>(label_w + cell * static_cast<double>(cols) + 40));
  const int H = static_cast<int>(top + cell * static_cast<double>(rows) + 30);
  auto [surface, cr] = white_canvas(W, H);
  cairo_set_source_rgb(cr, 0, 0, 0);
  text_at(cr, W / 2.0, 20, title, 15, 0.5);
  text_at(cr, label_w + cell * static_cast<double>(cols) / 2, 44, col_axis, 12, 0.5);
  text_at(cr, 14, top + cell * static_cast<double>(rows) / 2, row_axis, 12, 0.5, -M_PI / 2);
  const double fs = std::clamp(cell * 0.3, 7.0, 13.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t total = 0;
    for (std::int64_t c = 0; c < cols; ++c) total += counts[static_cast<std::size_t>(r * cols + c)];
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::int64_t n = counts[static_cast<std::size_t>(r * cols + c)];
      const double t = total > 0 ? static_cast<double>(n) / static_cast<double>(total) : 0.0;
      cairo_set_source_rgb(cr, 1 - 0.95 * t, 1 - 0.75 * t, 1 - 0.35 * t);
      const double x = label_w + cell * static_cast<double>(c), y = top + cell * static_cast<double>(r);
      cairo_rectangle(cr, x, y, cell, cell);
      cairo_fill(cr);
      cairo_set_source_rgb(cr, 0.75, 0.75, 0.75);
      cairo_set_line_width(cr, 0.5);
      cairo_rectangle(cr, x, y, cell, cell);
      cairo_stroke(cr);
      if (t > 0.55) cairo_set_source_rgb(cr, 1, 1, 1);
      else cairo_set_source_rgb(cr, 0, 0, 0);
      text_at(cr, x + cell / 2, y + cell / 2, fmt::format("{}", n), fs, 0.5);
    }
  }
  cairo_set_source_rgb(cr, 0, 0, 0);
  for (std::int64_t r = 0; r < rows && r < static_cast<std::int64_t>(row_labels.size()); ++r)
    text_at(cr, label_w - 6, top + cell * (static_cast<double>(r) + 0.5),
            shorten(row_labels[static_cast<std::size_t>(r)], 20), ls, 1.0);
  for (std::int64_t c = 0; c < cols && c < static_cast<std::int64_t>(col_labels.size()); ++c)
    text_at(cr, label_w + cell * (static_cast<double>(c) + 0.5), top - 6,
            shorten(col_labels[static_cast<std::size_t>(c)], 16), ls, 0.0, -M_PI / 2);
  cairo_destroy(cr);
  save(surface, path);
}

void heatmap_png(const std::string& path, const std::string& title, const std::vector<float>& weights,
                 std::int64_t rows, std::int64_t cols, const std::vector<std::string>& row_labels,
                 const std::vector<std::string>& col_labels) {
  write_file_atomic(path, heatmap_png_bytes(title, weights, rows, cols, row_labels, col_labels));
}

std::string heatmap_png_bytes(const std::string& title, const std::vector<float>& weights, std::int64_t rows,
                              std::int64_t cols, const std::vector<std::string>& row_labels,
                              const std::vector<std::string>& col_labels) {
  check<ShapeError>(static_cast<std::int64_t>(weights.size()) == rows * cols && rows > 0 && cols > 0,
                    "heatmap of {} x {} needs {} weights, got {}", rows, cols, rows * cols, weights.size());
  const double cell = std::clamp(640.0 / static_cast<double>(std::max(rows, cols)), 4.0, 28.0);
  const bool labels = cell >= 10;
  const double label_w = labels ? 110 : 20, top = 50 + (labels ? 90 : 0);
  const int W = static_cast<int>(label_w + cell * static_cast<double>(cols) + 90);
  const int H = static_cast<int>(top + cell * static_cast<double>(rows) + 20);
  auto [surface, cr] = white_canvas(W, H);
  cairo_set_source_rgb(cr, 0, 0, 0);
  text_at(cr, W / 2.0, 20, title, 15, 0.5);
  // White (0) to dark blue (the largest weight), on a square-root scale so that small weights show.
  float top_weight = 0;
  for (float w : weights)
    if (std::isfinite(w)) top_weight = std::max(top_weight, w);
  if (top_weight <= 0) top_weight = 1;
  auto colour = [](double t) {
    t = std::sqrt(std::clamp(t, 0.0, 1.0));
    return std::array<double, 3>{1 - 0.95 * t, 1 - 0.75 * t, 1 - 0.35 * t};
  };
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto rgb = colour(weights[static_cast<std::size_t>(r * cols + c)] / top_weight);
      cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
      cairo_rectangle(cr, label_w + cell * static_cast<double>(c), top + cell * static_cast<double>(r), cell, cell);
      cairo_fill(cr);
    }
  cairo_set_source_rgb(cr, 0, 0, 0);
  if (labels) {
    const double fs = std::min(11.0, cell * 0.75);
    for (std::int64_t r = 0; r < rows && r < static_cast<std::int64_t>(row_labels.size()); ++r)
      text_at(cr, label_w - 4, top + cell * (static_cast<double>(r) + 0.5),
              shorten(row_labels[static_cast<std::size_t>(r)], 14), fs, 1.0);
    for (std::int64_t c = 0; c < cols && c < static_cast<std::int64_t>(col_labels.size()); ++c)
      text_at(cr, label_w + cell * (static_cast<double>(c) + 0.5), top - 4,
              shorten(col_labels[static_cast<std::size_t>(c)], 14), fs, 0.0, -M_PI / 2);
  }
  // Colour bar.
  const double bx = label_w + cell * static_cast<double>(cols) + 20,
               bh = std::max(60.0, cell * static_cast<double>(rows));
  for (int i = 0; i < 100; ++i) {
    const auto rgb = colour(1.0 - i / 99.0);
    cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
    cairo_rectangle(cr, bx, top + bh * i / 100.0, 14, bh / 100.0 + 1);
    cairo_fill(cr);
  }
  cairo_set_source_rgb(cr, 0, 0, 0);
  text_at(cr, bx + 18, top + 4, fmt::format("{:.3g}", top_weight), 10);
  text_at(cr, bx + 18, top + bh - 4, "0", 10);
  cairo_destroy(cr);
  return encode(surface, title);
}

std::string figure_markdown(const std::string& alt, const std::string& link, const std::function<void()>& draw) {
  std::string why;
  try {
    draw();
    return fmt::format("![{}]({})\n\n", alt, link);
  } catch (const Error& e) {
    why = e.what();
  } catch (const std::bad_alloc&) {
    why = "out of memory";
  }
  return fmt::format("*The figure {} ({}) could not be drawn: {}.*\n\n", alt, link, clip_text(why, 200));
}

}  // namespace multihead
