/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the pi0ros2 elements make of ROS 2 messages, apart from rcl (docs/ros2.md): joint states
 * picked by name into the robot configuration's order, with the checks that keep a bad sample
 * from becoming a state; a message's stamp on the pipeline's running time; sensor_msgs/Image
 * encodings as GStreamer video formats. Neither ROS 2 nor GStreamer here, so the tests run
 * everywhere. */

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pi0::ros
{

/* Why a sample was not used (each is counted and warned about): a JointState's, or for the
 * stamp kinds any message's. */
enum class JointIssue {
  kNone,
  kMissingJoint, /* a configured joint is not in name[] */
  kDuplicate,    /* a configured joint appears twice in name[] */
  kLengths,      /* position[] shorter than name[] */
  kNonFinite,    /* a picked position is NaN or infinite */
  kNoStamp,      /* header.stamp is zero */
  kStampPast,    /* older than the allowed age */
  kStampFuture,  /* ahead of now by more than the allowed skew */
  kCount
};
const char *joint_issue_name (JointIssue i);

struct JointPick {
  JointIssue issue = JointIssue::kNone;
  std::string detail;        /* for the warning: which joint, which lengths, how old */
  std::vector<float> values; /* in the configuration's order (when issue == kNone) */
};

/* Whether a message may be used, by its header stamp: kNone, or kNoStamp (the stamp is 0),
 * kStampPast (older than @max_age_ns, or no ROS time known yet: !@have_time, a sim time before
 * the first /clock), kStampFuture (further ahead than @max_ahead_ns: clocks out of step).
 * @age_ns: how long ago the stamp was on the ROS clock (negative: ahead). *detail says why. */
JointIssue check_stamp (bool have_time, bool stamp_zero, int64_t age_ns, int64_t max_age_ns,
                        int64_t max_ahead_ns, std::string *detail);

/* Picks @want's joints, in @want's order, from a JointState's @names (@n_names) and
 * @positions (@n_positions): extra joints are ignored, any order is fine. */
JointPick pick_joints (const std::vector<std::string> &want, const char *const *names,
                       size_t n_names, const double *positions, size_t n_positions);

/* The running time at which something stamped @age_ns ago on the ROS clock happened, when the
 * running time is @running_now: never before 0. */
uint64_t running_time_of (uint64_t running_now, int64_t age_ns);

/* A sensor_msgs/Image encoding as a GStreamer video format. */
struct ImageLayout {
  const char *gst_format = nullptr; /* "RGB", "BGR", "RGBA", ... (nullptr: unsupported) */
  unsigned bytes_per_pixel = 0;     /* of the first plane (luma for NV12/NV21) */
  /* Bytes of the whole image per byte of the first plane: 1, or 3/2 (NV12/NV21: the chroma
   * plane follows the luma plane, same stride). */
  unsigned size_num = 1, size_den = 1;
};
/* @encoding as in sensor_msgs/image_encodings.hpp ("rgb8", "bgr8", "rgba8", "bgra8", "mono8",
 * "mono16", "yuv422" (UYVY), "yuv422_yuy2" (YUY2), "nv12", "nv21"); @big_endian for mono16. */
ImageLayout image_layout (const std::string &encoding, bool big_endian);
/* The encodings image_layout() takes, for messages. */
const char *supported_encodings ();

/* Checks an Image's geometry: "" when usable, else why not. */
std::string check_image (const ImageLayout &l, uint32_t width, uint32_t height, uint32_t step,
                         size_t data_size);

/* A CompressedImage's format ("jpeg", "png", "rgb8; jpeg compressed bgr8", ...) as caps media
 * type ("image/jpeg", "image/png"), nullptr when neither. */
const char *compressed_media_type (const std::string &format);

} // namespace pi0::ros
