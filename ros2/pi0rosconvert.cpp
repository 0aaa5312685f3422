/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* ROS 2 messages into the chain's terms (pi0rosconvert.h). Built without -ffast-math: the NaN
 * check of joint positions must hold. */

#include "ros2/pi0rosconvert.h"

#ifdef __FAST_MATH__
#error "pi0rosconvert.cpp checks joint positions for NaN: build it without -ffast-math"
#endif

#include <cmath>
#include <cstring>

namespace pi0::ros
{

const char *
joint_issue_name (JointIssue i)
{
  switch (i) {
    case JointIssue::kNone:
      return "none";
    case JointIssue::kMissingJoint:
      return "missing-joint";
    case JointIssue::kDuplicate:
      return "duplicate-joint";
    case JointIssue::kLengths:
      return "lengths";
    case JointIssue::kNonFinite:
      return "non-finite";
    case JointIssue::kNoStamp:
      return "no-stamp";
    case JointIssue::kStampPast:
      return "stamp-past";
    case JointIssue::kStampFuture:
      return "stamp-future";
    case JointIssue::kCount:
      break;
  }
  return "?";
}

JointIssue
check_stamp (bool have_time, bool stamp_zero, int64_t age_ns, int64_t max_age_ns,
             int64_t max_ahead_ns, std::string *detail)
{
  if (!have_time) {
    *detail = "no ROS time yet (use-sim-time: no /clock message)";
    return JointIssue::kStampPast;
  }
  if (stamp_zero) {
    *detail = "header.stamp is 0";
    return JointIssue::kNoStamp;
  }
  if (age_ns > max_age_ns) {
    *detail = "stamped " + std::to_string (age_ns / 1000000) + " ms ago (max-age)";
    return JointIssue::kStampPast;
  }
  if (-age_ns > max_ahead_ns) {
    *detail = "stamped " + std::to_string (-age_ns / 1000000) + " ms in the future (max-ahead)";
    return JointIssue::kStampFuture;
  }
  return JointIssue::kNone;
}

JointPick
pick_joints (const std::vector<std::string> &want, const char *const *names, size_t n_names,
             const double *positions, size_t n_positions)
{
  JointPick r;
  auto fail = [&] (JointIssue i, std::string d) {
    r.issue = i;
    r.detail = std::move (d);
    r.values.clear ();
    return r;
  };
  if (n_positions < n_names)
    return fail (JointIssue::kLengths, std::to_string (n_names) + " names but " +
                                           std::to_string (n_positions) + " positions");
  r.values.resize (want.size ());
  for (size_t j = 0; j < want.size (); j++) {
    size_t at = n_names;
    for (size_t i = 0; i < n_names; i++) {
      if (names[i] && want[j] == names[i]) {
        if (at != n_names)
          return fail (JointIssue::kDuplicate, "joint \"" + want[j] + "\" appears twice");
        at = i;
      }
    }
    if (at == n_names)
      return fail (JointIssue::kMissingJoint, "no joint \"" + want[j] + "\"");
    const double v = positions[at];
    if (!std::isfinite (v) || !std::isfinite ((float)v))
      return fail (JointIssue::kNonFinite, "joint \"" + want[j] + "\" is " + std::to_string (v));
    r.values[j] = (float)v;
  }
  return r;
}

uint64_t
running_time_of (uint64_t running_now, int64_t age_ns)
{
  if (age_ns <= 0)
    return running_now; /* within the allowed skew ahead: now, never later */
  return (uint64_t)age_ns >= running_now ? 0 : running_now - (uint64_t)age_ns;
}

ImageLayout
image_layout (const std::string &e, bool big_endian)
{
  struct Row {
    const char *ros, *gst;
    unsigned bpp, num, den;
  };
  static const Row rows[] = {
      {"rgb8", "RGB", 3, 1, 1},    {"bgr8", "BGR", 3, 1, 1},    {"rgba8", "RGBA", 4, 1, 1},
      {"bgra8", "BGRA", 4, 1, 1},  {"mono8", "GRAY8", 1, 1, 1}, {"8UC1", "GRAY8", 1, 1, 1},
      {"yuv422", "UYVY", 2, 1, 1}, {"uyvy", "UYVY", 2, 1, 1},   {"yuv422_yuy2", "YUY2", 2, 1, 1},
      {"yuyv", "YUY2", 2, 1, 1},   {"nv12", "NV12", 1, 3, 2},   {"nv21", "NV21", 1, 3, 2},
  };
  ImageLayout l;
  if (e == "mono16" || e == "16UC1") {
    l.gst_format = big_endian ? "GRAY16_BE" : "GRAY16_LE";
    l.bytes_per_pixel = 2;
    return l;
  }
  for (const Row &r : rows)
    if (e == r.ros) {
      l.gst_format = r.gst;
      l.bytes_per_pixel = r.bpp;
      l.size_num = r.num;
      l.size_den = r.den;
    }
  return l;
}

const char *
supported_encodings ()
{
  return "rgb8, bgr8, rgba8, bgra8, mono8, mono16, yuv422 (UYVY), yuv422_yuy2, nv12, nv21";
}

std::string
check_image (const ImageLayout &l, uint32_t width, uint32_t height, uint32_t step, size_t data_size)
{
  if (width == 0 || height == 0 || width > 16384 || height > 16384)
    return "size " + std::to_string (width) + "x" + std::to_string (height) +
           " is not 1..16384 on each side";
  if ((l.size_num != l.size_den) && (width % 2 || height % 2) && l.size_den == 2)
    return "a 4:2:0 image needs an even width and height";
  const uint64_t row = (uint64_t)width * l.bytes_per_pixel;
  if (step < row)
    return "step " + std::to_string (step) + " is shorter than a row (" + std::to_string (row) +
           " bytes)";
  const uint64_t need = (uint64_t)step * height * l.size_num / l.size_den;
  if (data_size < need)
    return "data holds " + std::to_string (data_size) + " bytes, the image needs " +
           std::to_string (need);
  return "";
}

const char *
compressed_media_type (const std::string &format)
{
  std::string f = format;
  for (char &c : f)
    c = (char)tolower ((unsigned char)c);
  /* "rgb8; jpeg compressed bgr8": the part after ';' names the codec. */
  const size_t semi = f.find (';');
  const std::string codec = semi == std::string::npos ? f : f.substr (semi + 1);
  if (codec.find ("jpeg") != std::string::npos || codec.find ("jpg") != std::string::npos)
    return "image/jpeg";
  if (codec.find ("png") != std::string::npos)
    return "image/png";
  return nullptr;
}

} // namespace pi0::ros
