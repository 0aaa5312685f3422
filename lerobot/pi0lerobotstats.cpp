/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Statistics as LeRobot stores them (datasets/compute_stats.py of the lerobot package): min,
 * max, mean, population std, count and the quantiles q01, q10, q50, q90, q99, per dimension.
 * LeRobot estimates the quantiles from 5000-bin histograms; here they are exact (linear
 * interpolation between order statistics, numpy's default), which its loader cannot tell
 * apart. */
#include "lerobot/pi0lerobot.h"

#include <algorithm>
#include <cmath>

namespace pi0::lerobot
{

namespace
{

constexpr double kQuantiles[5] = {0.01, 0.10, 0.50, 0.90, 0.99};

std::vector<double> *
quantile_slot (Stats &s, int i)
{
  switch (i) {
    case 0:
      return &s.q01;
    case 1:
      return &s.q10;
    case 2:
      return &s.q50;
    case 3:
      return &s.q90;
    default:
      return &s.q99;
  }
}

} // namespace

Stats
vector_stats (const double *rows, size_t n, size_t dim)
{
  Stats s;
  s.count = (int64_t)n;
  std::vector<double> col (n);
  for (size_t d = 0; d < dim; d++) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
      col[i] = rows[i * dim + d];
      sum += col[i];
    }
    const double mean = n ? sum / (double)n : 0.0;
    double var = 0;
    for (size_t i = 0; i < n; i++)
      var += (col[i] - mean) * (col[i] - mean);
    var = n ? var / (double)n : 0.0;
    std::sort (col.begin (), col.end ());
    s.min.push_back (n ? col.front () : 0.0);
    s.max.push_back (n ? col.back () : 0.0);
    s.mean.push_back (mean);
    s.std.push_back (std::sqrt (var));
    for (int q = 0; q < 5; q++) {
      double v = mean; /* one sample: LeRobot sets every quantile to the mean */
      if (n >= 2) {
        const double pos = kQuantiles[q] * (double)(n - 1);
        const size_t lo = (size_t)std::floor (pos);
        const size_t hi = std::min (lo + 1, n - 1);
        v = col[lo] + (pos - (double)lo) * (col[hi] - col[lo]);
      }
      quantile_slot (s, q)->push_back (v);
    }
  }
  return s;
}

Stats
aggregate_stats (const std::vector<Stats> &parts)
{
  Stats out;
  if (parts.empty ())
    return out;
  const size_t dim = parts[0].mean.size ();
  int64_t total = 0;
  for (auto &p : parts)
    total += p.count;
  out.count = total;
  for (size_t d = 0; d < dim; d++) {
    double mn = parts[0].min[d], mx = parts[0].max[d], mean = 0;
    for (auto &p : parts) {
      mn = std::min (mn, p.min[d]);
      mx = std::max (mx, p.max[d]);
      mean += p.mean[d] * (double)p.count;
    }
    mean = total ? mean / (double)total : 0.0;
    double var = 0;
    for (auto &p : parts) {
      const double dm = p.mean[d] - mean;
      var += (p.std[d] * p.std[d] + dm * dm) * (double)p.count;
    }
    var = total ? var / (double)total : 0.0;
    out.min.push_back (mn);
    out.max.push_back (mx);
    out.mean.push_back (mean);
    out.std.push_back (std::sqrt (var));
    for (int q = 0; q < 5; q++) {
      double v = 0;
      for (auto &p : parts) {
        Stats &pp = const_cast<Stats &> (p);
        v += (*quantile_slot (pp, q))[d] * (double)p.count;
      }
      quantile_slot (out, q)->push_back (total ? v / (double)total : 0.0);
    }
  }
  return out;
}

void
ImageStats::add (const uint8_t *rgb, int width, int height, int stride)
{
  for (int y = 0; y < height; y++) {
    const uint8_t *p = rgb + (size_t)y * stride;
    for (int x = 0; x < width; x++, p += 3) {
      hist_[0][p[0]]++;
      hist_[1][p[1]]++;
      hist_[2][p[2]]++;
    }
  }
  frames_++;
}

Stats
ImageStats::finish () const
{
  Stats s;
  s.count = frames_;
  for (int c = 0; c < 3; c++) {
    uint64_t n = 0;
    double sum = 0;
    int lo = -1, hi = -1;
    for (int v = 0; v < 256; v++) {
      const uint64_t h = hist_[c][v];
      if (!h)
        continue;
      n += h;
      sum += (double)v * (double)h;
      if (lo < 0)
        lo = v;
      hi = v;
    }
    const double mean = n ? sum / (double)n : 0.0;
    double var = 0;
    for (int v = 0; v < 256; v++)
      var += (double)hist_[c][v] * ((double)v - mean) * ((double)v - mean);
    var = n ? var / (double)n : 0.0;
    s.min.push_back (lo < 0 ? 0.0 : lo / 255.0);
    s.max.push_back (hi < 0 ? 0.0 : hi / 255.0);
    s.mean.push_back (mean / 255.0);
    s.std.push_back (std::sqrt (var) / 255.0);
    /* The value of order statistic k (0-based) from the histogram. */
    auto at = [&] (uint64_t k) {
      uint64_t cum = 0;
      for (int v = 0; v < 256; v++) {
        cum += hist_[c][v];
        if (k < cum)
          return (double)v;
      }
      return (double)(hi < 0 ? 0 : hi);
    };
    for (int q = 0; q < 5; q++) {
      double v = 0;
      if (n) {
        const double pos = kQuantiles[q] * (double)(n - 1);
        const uint64_t k = (uint64_t)std::floor (pos);
        const double a = at (k), b = at (std::min<uint64_t> (k + 1, n - 1));
        v = a + (pos - (double)k) * (b - a);
      }
      quantile_slot (s, q)->push_back (v / 255.0);
    }
  }
  return s;
}

} // namespace pi0::lerobot
