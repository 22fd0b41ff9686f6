// Memory over the schedule as a self-contained SVG (or an HTML page around it): stacked by category,
// the runtime's allocator overhead on top, the peak marked with the tensors live there.
#pragma once

#include <string>

#include "report/estimate.h"

namespace memplan {

std::string timeline_svg(const Estimate& e, const std::string& configuration);
std::string timeline_html(const Estimate& e, const std::string& configuration);

}  // namespace memplan
