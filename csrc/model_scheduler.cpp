// Band scheduler (mirrored in engine/scheduler.py; tests check they agree).
#include "model_scheduler.h"

#include <algorithm>
#include <stdexcept>

namespace dq {

std::vector<int> schedule_bands(int start, int n_tokens, int chunk, const std::vector<int>& ratios) {
    if (start < 0 || n_tokens < 0 || chunk < 1) throw std::invalid_argument("schedule: start, n_tokens >= 0 and chunk >= 1 required");
    std::vector<int> widths;
    int pos = start, left = n_tokens;
    while (left > 0) {
        int w = std::min(chunk, left);
        for (int r : ratios)
            if (r > 0) w = std::min(w, r - pos % r);
        w = std::max(w, 1);
        widths.push_back(w);
        pos += w;
        left -= w;
    }
    return widths;
}

std::vector<int> schedule_approximate(int n_tokens, int width) {
    if (n_tokens < 0 || width < 1) throw std::invalid_argument("schedule_approximate: n_tokens >= 0 and width >= 1 required");
    std::vector<int> widths;
    for (int left = n_tokens; left > 0; left -= std::min(width, left)) widths.push_back(std::min(width, left));
    return widths;
}

}  // namespace dq
