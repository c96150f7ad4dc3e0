#include "multihead/report/plots.h"

#include <cairo.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"

namespace multihead {
namespace {

// Colours of the series, in order (a colour-blind-safe palette).
constexpr double kPalette[][3] = {{0.0, 0.45, 0.70}, {0.90, 0.62, 0.0}, {0.0, 0.62, 0.45},
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

std::string tick_label(double v) {
  char buf[32];
  const double a = std::fabs(v);
  if (a != 0 && (a >= 1e5 || a < 1e-3)) std::snprintf(buf, sizeof buf, "%.1e", v);
  else if (a >= 100) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
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

void line_plot_png(const std::string& path, const std::string& title, const std::string& x_label,
                   const std::string& y_label, const std::vector<Series>& series) {
  const int W = 800, H = 480;
  const double left = 80, right = 20, top = 50, bottom = 60;
  cairo_surface_t* surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
  cairo_t* cr = cairo_create(surface);
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);

  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : series)
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
    }
  if (!(x0 < x1)) x1 = x0 + 1, x0 = std::isfinite(x0) ? x0 : 0, x1 = std::isfinite(x1) ? x1 : 1;
  if (!(y0 < y1)) y0 = std::isfinite(y0) ? y0 - 0.5 : 0, y1 = y0 + 1;
  // y: a little room around the data, then out to whole tick steps; a
  // quantity that is never negative (a loss, bytes) keeps 0 as its floor.
  const bool non_negative = y0 >= 0;
  const double pad = 0.03 * (y1 - y0);
  y0 -= pad, y1 += pad;
  if (non_negative) y0 = std::max(y0, 0.0);
  const double ystep = nice_tick_step(y1 - y0, 5), xstep = nice_tick_step(x1 - x0, 8);
  y0 = std::floor(y0 / ystep) * ystep, y1 = std::ceil(y1 / ystep) * ystep;
  const double pw = W - left - right, ph = H - top - bottom;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return top + (1 - (y - y0) / (y1 - y0)) * ph; };

  cairo_set_source_rgb(cr, 0, 0, 0);
  text_at(cr, W / 2.0, 22, title, 17, 0.5);
  text_at(cr, left + pw / 2, H - 18, x_label, 13, 0.5);
  text_at(cr, 22, top + ph / 2, y_label, 13, 0.5, -M_PI / 2);
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
  for (double yv = y0; yv <= y1 + 1e-9 * ystep; yv += ystep) {
    const double v = std::fabs(yv) < 1e-9 * ystep ? 0.0 : yv;  // no "-0" or 1e-17 from the sum
    grid_line(left, py(v), left + pw, py(v));
    text_at(cr, left - 6, py(v), tick_label(v), 11, 1.0);
  }
  for (double xv = std::ceil(x0 / xstep) * xstep; xv <= x1 + 1e-9 * xstep; xv += xstep) {
    const double v = std::fabs(xv) < 1e-9 * xstep ? 0.0 : xv;
    grid_line(px(v), top, px(v), top + ph);
    text_at(cr, px(v), top + ph + 14, tick_label(v), 11, 0.5);
  }
  cairo_set_source_rgb(cr, 0, 0, 0);
  cairo_rectangle(cr, left, top, pw, ph);
  cairo_stroke(cr);
  // Series, then the legend over them: a white box in the top right corner,
  // as wide as the longest name.
  cairo_set_line_width(cr, 2);
  for (std::size_t k = 0; k < series.size(); ++k) {
    const auto& c = kPalette[k % std::size(kPalette)];
    cairo_set_source_rgb(cr, c[0], c[1], c[2]);
    const auto& s = series[k];
    bool started = false;
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      if (!started) cairo_move_to(cr, px(s.x[i]), py(s.y[i]));
      else cairo_line_to(cr, px(s.x[i]), py(s.y[i]));
      started = true;
    }
    if (s.x.size() == 1) cairo_arc(cr, px(s.x[0]), py(s.y[0]), 3, 0, 2 * M_PI);
    cairo_stroke(cr);
  }
  if (!series.empty()) {
    cairo_set_font_size(cr, 12);
    double text_w = 0;
    for (const auto& s : series) {
      cairo_text_extents_t ext;
      cairo_text_extents(cr, s.name.c_str(), &ext);
      text_w = std::max(text_w, ext.x_advance);
    }
    const double row = 18, box_w = 8 + 25 + 7 + text_w + 8, box_h = row * static_cast<double>(series.size()) + 8;
    const double bx = left + pw - box_w - 8, by = top + 8;
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, bx, by, box_w, box_h);
    cairo_set_source_rgba(cr, 1, 1, 1, 0.88);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.7, 0.7, 0.7);
    cairo_stroke(cr);
    cairo_set_line_width(cr, 2);
    for (std::size_t k = 0; k < series.size(); ++k) {
      const auto& c = kPalette[k % std::size(kPalette)];
      const double ly = by + 4 + row / 2 + row * static_cast<double>(k);
      cairo_set_source_rgb(cr, c[0], c[1], c[2]);
      cairo_move_to(cr, bx + 8, ly);
      cairo_line_to(cr, bx + 33, ly);
      cairo_stroke(cr);
      cairo_set_source_rgb(cr, 0, 0, 0);
      text_at(cr, bx + 40, ly, series[k].name, 12);
    }
  }
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
  cairo_surface_t* surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
  cairo_t* cr = cairo_create(surface);
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
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
      text_at(cr, label_w - 4, top + cell * (static_cast<double>(r) + 0.5), shorten(row_labels[static_cast<std::size_t>(r)], 14), fs, 1.0);
    for (std::int64_t c = 0; c < cols && c < static_cast<std::int64_t>(col_labels.size()); ++c)
      text_at(cr, label_w + cell * (static_cast<double>(c) + 0.5), top - 4, shorten(col_labels[static_cast<std::size_t>(c)], 14), fs, 0.0,
              -M_PI / 2);
  }
  // Colour bar.
  const double bx = label_w + cell * static_cast<double>(cols) + 20, bh = std::max(60.0, cell * static_cast<double>(rows));
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

}  // namespace multihead
