#include "report/timeline.h"

#include <fmt/format.h>

#include <algorithm>

#include "report/sizes.h"

namespace memplan {
namespace {

constexpr int kWidth = 1000, kHeight = 420, kLeft = 80, kRight = 190, kTop = 50, kBottom = 60;

struct Layer {
  const char* label;
  const char* color;
};

// Drawn bottom to top; indices follow Category, then the allocator's share.
constexpr Layer kLayers[] = {
    {"weights", "#4e79a7"},          {"activations", "#f28e2b"}, {"gradients", "#59a14f"},
    {"activation grads", "#8cd17d"}, {"optimizer states", "#b07aa1"}, {"workspace", "#9c755f"},
    {"allocator overhead", "#bab0ac"},
};
constexpr Category kOrder[] = {Category::Weight,         Category::Activation,     Category::Gradient,
                               Category::ActivationGrad, Category::OptimizerState, Category::Workspace};

std::string escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    switch (c) {
      case '<': r += "&lt;"; break;
      case '>': r += "&gt;"; break;
      case '&': r += "&amp;"; break;
      case '"': r += "&quot;"; break;
      default: r += c;
    }
  }
  return r;
}

}  // namespace

std::string timeline_svg(const Estimate& e, const std::string& configuration) {
  const size_t n = e.per_step_by_category.size();
  // Stacked values per step: six categories, then reserved − exact (the allocator's share) where known.
  std::vector<std::array<double, 7>> stack(n);
  double ymax = 1;
  for (size_t s = 0; s < n; ++s) {
    double sum = 0;
    for (int k = 0; k < 6; ++k) {
      sum += static_cast<double>(e.per_step_by_category[s][static_cast<int>(kOrder[k])]);
      stack[s][k] = sum;
    }
    const double reserved = s < e.reserved_per_step.size() ? static_cast<double>(e.reserved_per_step[s]) : sum;
    stack[s][6] = std::max(sum, reserved);
    ymax = std::max(ymax, stack[s][6]);
  }
  ymax = std::max(ymax, static_cast<double>(e.total_bytes)) * 1.08;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto x = [&](double step) { return kLeft + (n <= 1 ? 0.0 : step / static_cast<double>(n - 1) * pw); };
  auto y = [&](double bytes) { return kTop + ph - bytes / ymax * ph; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"20\" font-size=\"15\" font-weight=\"bold\">{}</text>\n"
      "<text x=\"{}\" y=\"38\" fill=\"#555\">{} — total {} (the runtime's reserved peak)</text>\n",
      kWidth, kHeight, kWidth, kHeight, kLeft, escape(e.model), kLeft, escape(configuration), format_bytes(e.total_bytes));
  // Axes and gridlines: five bands labelled in binary units.
  for (int i = 0; i <= 5; ++i) {
    const double v = ymax / 1.08 * i / 5;
    svg += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e5e5e5\"/>"
                       "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\" fill=\"#555\">{}</text>\n",
                       kLeft, kLeft + pw, y(v), y(v), kLeft - 6, y(v) + 4, format_bytes(static_cast<uint64_t>(v)));
  }
  // One polygon per layer, from its top edge back along the layer below.
  for (int k = 6; k >= 0; --k) {
    std::string points;
    for (size_t s = 0; s < n; ++s) points += fmt::format("{:.1f},{:.1f} ", x(static_cast<double>(s)), y(stack[s][k]));
    for (size_t s = n; s-- > 0;)
      points += fmt::format("{:.1f},{:.1f} ", x(static_cast<double>(s)), y(k == 0 ? 0.0 : stack[s][k - 1]));
    if (n > 0) svg += fmt::format("<polygon points=\"{}\" fill=\"{}\" stroke=\"none\"/>\n", points, kLayers[k].color);
  }
  svg += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#333\"/>\n", kLeft, kLeft + pw, y(0), y(0));
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" fill=\"#555\">schedule step (0 … {})</text>\n",
                     kLeft + pw / 2, kHeight - 22, n == 0 ? 0 : n - 1);
  // The peak.
  if (e.peak_step >= 0 && static_cast<size_t>(e.peak_step) < n) {
    const double px = x(e.peak_step);
    svg += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2:.1f}\" stroke=\"#d62728\" stroke-dasharray=\"4 3\"/>\n"
                       "<text x=\"{3:.1f}\" y=\"{4}\" fill=\"#d62728\" text-anchor=\"{5}\">peak: {6} allocated at step {7} ({8}, {9})</text>\n",
                       px, kTop, y(0), px + (px > kLeft + pw / 2 ? -4 : 4), kTop + 12,
                       px > kLeft + pw / 2 ? "end" : "start", format_bytes(e.allocated_bytes), e.peak_step, escape(e.peak_op),
                       phase_name(e.peak_phase));
    int line = 0;
    for (const LiveTensor& t : e.top_live) {
      if (line == 5) break;
      std::string name = t.name.size() > 48 ? "…" + t.name.substr(t.name.size() - 47) : t.name;
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" fill=\"#333\" font-size=\"11\" text-anchor=\"{}\">{} {}</text>\n",
                         px + (px > kLeft + pw / 2 ? -4 : 4), kTop + 28 + 14 * line, px > kLeft + pw / 2 ? "end" : "start",
                         format_bytes(t.bytes), escape(name));
      ++line;
    }
  }
  // Legend.
  for (int k = 6, row = 0; k >= 0; --k, ++row)
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
                       kLeft + pw + 16, kTop + row * 18, kLayers[k].color, kLeft + pw + 34, kTop + row * 18 + 10,
                       kLayers[k].label);
  svg += "</svg>\n";
  return svg;
}

std::string timeline_html(const Estimate& e, const std::string& configuration) {
  std::string html = fmt::format(
      "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>memplan timeline: {}</title>\n"
      "<style>body{{font-family:Helvetica,Arial,sans-serif;margin:24px;color:#222}}"
      "table{{border-collapse:collapse}}td,th{{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left}}"
      "td.n{{text-align:right}}</style></head><body>\n",
      escape(e.model));
  html += timeline_svg(e, configuration);
  html += "<h3>Largest tensors live at the peak</h3>\n<table><tr><th>bytes</th><th>category</th><th>op</th><th>tensor</th></tr>\n";
  for (const LiveTensor& t : e.top_live)
    html += fmt::format("<tr><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n", format_bytes(t.bytes),
                        category_name(t.category), escape(t.op), escape(t.name));
  html += "</table>\n</body></html>\n";
  return html;
}

}  // namespace memplan
