// loss.csv -> loss.svg (loss_plot.h): two polylines over shared axes, ticks, a legend.
#include "gpt/loss_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>


namespace ember::app {

namespace {

struct Point {
  double iter, loss;
};

// The fields of one CSV line (no quoting: ember-gpt writes numbers only).
std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string f;
  while (std::getline(ss, f, ',')) out.push_back(f);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

bool number(const std::string& s, double* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(*v);
}

std::string fmt(double v, int digits = 3) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

}  // namespace

bool write_loss_plot(const std::string& csv_path, const std::string& svg_path) {
  std::ifstream in(csv_path);
  if (!in) return false;
  std::vector<Point> train, val;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const std::vector<std::string> f = fields(line);
    double it = 0, v = 0;
    if (f.size() < 3 || !number(f[0], &it)) continue;
    if (number(f[1], &v)) train.push_back({it, v});
    if (number(f[2], &v)) val.push_back({it, v});
  }
  if (train.empty() && val.empty()) return false;

  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto* series : {&train, &val})
    for (const Point& p : *series) {
      x0 = std::min(x0, p.iter);
      x1 = std::max(x1, p.iter);
      y0 = std::min(y0, p.loss);
      y1 = std::max(y1, p.loss);
    }
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 + 1;
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad;
  y1 += pad;
  constexpr double kW = 800, kH = 480, kLeft = 70, kRight = 20, kTop = 40, kBottom = 50;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * (kW - kLeft - kRight); };
  auto py = [&](double y) { return kH - kBottom - (y - y0) / (y1 - y0) * (kH - kTop - kBottom); };

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH
      << "\" viewBox=\"0 0 " << kW << " " << kH << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << kW / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
      << "ember-gpt: loss by iteration</text>\n";
  // Axes, ticks and grid lines.
  svg << "<g stroke=\"#ccc\">\n";
  for (int k = 0; k <= 5; ++k) {
    const double yv = y0 + (y1 - y0) * k / 5, xv = x0 + (x1 - x0) * k / 5;
    svg << "<line x1=\"" << kLeft << "\" x2=\"" << kW - kRight << "\" y1=\"" << py(yv)
        << "\" y2=\"" << py(yv) << "\"/>\n"
        << "<line y1=\"" << kTop << "\" y2=\"" << kH - kBottom << "\" x1=\"" << px(xv)
        << "\" x2=\"" << px(xv) << "\"/>\n";
  }
  svg << "</g>\n";
  for (int k = 0; k <= 5; ++k) {
    const double yv = y0 + (y1 - y0) * k / 5, xv = x0 + (x1 - x0) * k / 5;
    svg << "<text x=\"" << kLeft - 6 << "\" y=\"" << py(yv) + 4 << "\" text-anchor=\"end\">"
        << fmt(yv) << "</text>\n"
        << "<text x=\"" << px(xv) << "\" y=\"" << kH - kBottom + 18
        << "\" text-anchor=\"middle\">" << fmt(std::round(xv), 6) << "</text>\n";
  }
  svg << "<text x=\"" << kW / 2 << "\" y=\"" << kH - 10 << "\" text-anchor=\"middle\">iteration</text>\n"
      << "<text x=\"16\" y=\"" << kH / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 16 "
      << kH / 2 << ")\">loss</text>\n";
  auto polyline = [&](const std::vector<Point>& pts, const char* color, double width) {
    if (pts.empty()) return;
    svg << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"" << width
        << "\" points=\"";
    for (const Point& p : pts) svg << fmt(px(p.iter), 6) << "," << fmt(py(p.loss), 6) << " ";
    svg << "\"/>\n";
    for (const Point& p : pts)
      if (&pts == &val)
        svg << "<circle cx=\"" << fmt(px(p.iter), 6) << "\" cy=\"" << fmt(py(p.loss), 6)
            << "\" r=\"3\" fill=\"" << color << "\"/>\n";
  };
  polyline(train, "#1f77b4", 1);
  polyline(val, "#d62728", 2);
  // Legend, with the last value of each series.
  const double lx = kW - kRight - 190;
  if (!train.empty())
    svg << "<line x1=\"" << lx << "\" x2=\"" << lx + 24 << "\" y1=\"" << kTop + 12 << "\" y2=\""
        << kTop + 12 << "\" stroke=\"#1f77b4\" stroke-width=\"2\"/><text x=\"" << lx + 30
        << "\" y=\"" << kTop + 16 << "\">train (last " << fmt(train.back().loss, 4) << ")</text>\n";
  if (!val.empty())
    svg << "<line x1=\"" << lx << "\" x2=\"" << lx + 24 << "\" y1=\"" << kTop + 30 << "\" y2=\""
        << kTop + 30 << "\" stroke=\"#d62728\" stroke-width=\"2\"/><text x=\"" << lx + 30
        << "\" y=\"" << kTop + 34 << "\">val (last " << fmt(val.back().loss, 4) << ")</text>\n";
  svg << "</svg>\n";

  // Written beside and renamed over, so a viewer never sees half a file.
  const std::string tmp = svg_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << svg.str();
    if (!out) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, svg_path, ec);
  return !ec;
}

}  // namespace ember::app
