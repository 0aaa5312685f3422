/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What pi0lerobotsink does with one camera of an episode, apart from the element: its frames
 * encoded to H.264 in MP4 by a small pipeline of its own (appsrc ! [videoconvert ! caps] !
 * encoder ! h264parse ! mp4mux ! filesink: its own bus and EOS, nothing shared with the chain),
 * lossless RGB as planar GBR in a 4:4:4 stream flagged GBR (exact), and the thumbnails LeRobot's
 * image statistics are computed from. GStreamer, but no element: errors come back as text. */

#include "lerobot/pi0lerobot.h"

#include <gst/gst.h>
#include <gst/pi0/pi0.h>
#include <gst/video/video.h>

#include <string>
#include <vector>

namespace pi0::record
{

/* pi0lerobotsink's `encoder` property (its GstPi0LeRobotEncoder values). */
enum class Encoder { Auto = 0, X264 = 1, Nvh264 = 2 };

struct EncoderSettings {
  Encoder encoder = Encoder::Auto;
  bool lossless = false;
  unsigned quantizer = 23; /* x264's qual quantizer / nvh264enc's constant QP */
  unsigned gop = 2;        /* frames between key frames */
};

class CameraEncoder
{
public:
  CameraEncoder () = default;
  CameraEncoder (const CameraEncoder &) = delete;
  CameraEncoder &operator= (const CameraEncoder &) = delete;
  ~CameraEncoder () { abort (); }

  /* How frames of format @f are encoded: whether they go as GBR (@gbr) or through videoconvert
   * (@convert), the pixel format FFmpeg will decode (@pix_fmt, for info.json) and the encoder
   * element. "" or what is missing. */
  static std::string plan (const EncoderSettings &s, GstVideoFormat f, bool *gbr, bool *convert,
                           std::string *pix_fmt, std::string *encoder);

  /* Starts the pipeline writing @path for frames laid out as @view at @fps. */
  bool start (const EncoderSettings &s, const GstVideoInfo &view, int fps, const std::string &path,
              std::string *error);
  /* Frame @index of the episode: view @v of @obs as it is (its memories, no copy) or repacked. */
  bool push (GstBuffer *obs, const GstPi0ObservationMeta *meta, guint v, guint64 index,
             std::string *error);
  /* EOS; the MP4 is complete when this returns true. */
  bool finish (std::string *error);
  /* Stops at once (the file is incomplete). */
  void abort ();

private:
  std::string bus_error (bool wait = false);

  GstElement *pipeline_ = nullptr, *appsrc_ = nullptr;
  GstVideoConverter *converter_ = nullptr;
  GstVideoInfo in_info_, gbr_info_;
  bool gbr_ = false, convert_ = false;
  int fps_ = 30;
};

/* One camera's image statistics (LeRobot's stats.json): RGB thumbnails of about 150 pixels a
 * side, as LeRobot downsamples, of every frame recorded. */
class CameraStats
{
public:
  CameraStats () = default;
  CameraStats (const CameraStats &) = delete;
  CameraStats &operator= (const CameraStats &) = delete;
  ~CameraStats ();

  bool init (const GstVideoInfo &in);
  void add (GstBuffer *obs, const GstPi0ObservationMeta *meta, guint v);
  pi0::lerobot::Stats finish () { return stats_.finish (); }

private:
  GstVideoConverter *conv_ = nullptr;
  GstVideoInfo out_;
  std::vector<uint8_t> buf_;
  pi0::lerobot::ImageStats stats_;
};

} // namespace pi0::record
