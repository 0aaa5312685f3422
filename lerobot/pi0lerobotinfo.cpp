/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* meta/info.json's features, written from a Schema and read back into one (see
 * pi0lerobotinfo.h). */
#include "lerobot/pi0lerobotinfo.h"

#include "lerobot/pi0lerobotinternal.h"

#include <cmath>

namespace pi0::lerobot
{

namespace
{

/* The integer features every LeRobot dataset has besides its own. */
constexpr const char *kDefaultInts[4] = {"frame_index", "episode_index", "index", "task_index"};

OJson
vector_feature (const std::vector<std::string> &names)
{
  OJson f;
  f["dtype"] = "float32";
  f["shape"] = OJson::array ({(int64_t)names.size ()});
  f["names"] = names;
  return f;
}

} // namespace

OJson
features_json (const Schema &s)
{
  OJson f = OJson::object ();
  f["observation.state"] = vector_feature (s.state_names);
  f["action"] = vector_feature (s.action_names);
  for (auto &c : s.cameras) {
    OJson v;
    v["dtype"] = "video";
    v["shape"] = OJson::array ({c.height, c.width, 3});
    v["names"] = OJson::array ({"height", "width", "channels"});
    OJson info;
    info["video.height"] = c.height;
    info["video.width"] = c.width;
    info["video.codec"] = c.codec;
    info["video.pix_fmt"] = c.pix_fmt;
    info["video.fps"] = s.fps;
    info["video.channels"] = 3;
    info["has_audio"] = false;
    /* The encoder keys LeRobot 0.6.1's writer adds (VIDEO_ENCODER_INFO_FIELD_NAMES). */
    info["video.g"] = c.gop > 0 ? OJson (c.gop) : OJson (nullptr);
    info["video.crf"] = c.crf >= 0 ? OJson (c.crf) : OJson (nullptr);
    info["video.preset"] = c.preset.empty () ? OJson (nullptr) : OJson (c.preset);
    info["video.fast_decode"] = 0;
    info["video.video_backend"] = "pyav";
    info["video.extra_options"] = OJson::object ();
    info["is_depth_map"] = false;
    v["info"] = info;
    f[c.key] = v;
  }
  OJson ts;
  ts["dtype"] = "float32";
  ts["shape"] = OJson::array ({1});
  ts["names"] = nullptr;
  f["timestamp"] = ts;
  for (const char *k : kDefaultInts) {
    OJson i;
    i["dtype"] = "int64";
    i["shape"] = OJson::array ({1});
    i["names"] = nullptr;
    f[k] = i;
  }
  return f;
}

std::vector<std::string>
feature_keys (const Schema &s)
{
  std::vector<std::string> k = {"observation.state", "action"};
  for (auto &c : s.cameras)
    k.push_back (c.key);
  k.push_back ("timestamp");
  for (const char *d : kDefaultInts)
    k.push_back (d);
  return k;
}

OJson
stats_json (const Stats &s, bool image)
{
  auto arr = [&] (const std::vector<double> &v) {
    OJson a = OJson::array ();
    for (double x : v)
      a.push_back (image ? OJson::array ({OJson::array ({x})}) : OJson (x));
    return a;
  };
  OJson o;
  o["min"] = arr (s.min);
  o["max"] = arr (s.max);
  o["mean"] = arr (s.mean);
  o["std"] = arr (s.std);
  o["count"] = OJson::array ({s.count});
  o["q01"] = arr (s.q01);
  o["q10"] = arr (s.q10);
  o["q50"] = arr (s.q50);
  o["q90"] = arr (s.q90);
  o["q99"] = arr (s.q99);
  return o;
}

const std::vector<double> &
stat_field (const Stats &s, int i)
{
  switch (i) {
    case 0:
      return s.min;
    case 1:
      return s.max;
    case 2:
      return s.mean;
    case 3:
      return s.std;
    case 5:
      return s.q01;
    case 6:
      return s.q10;
    case 7:
      return s.q50;
    case 8:
      return s.q90;
    default:
      return s.q99;
  }
}

std::vector<double> &
stat_field (Stats &s, int i)
{
  return const_cast<std::vector<double> &> (stat_field ((const Stats &)s, i));
}

std::shared_ptr<arrow::KeyValueMetadata>
hf_metadata (const Schema &s)
{
  OJson feats = OJson::object ();
  auto vec = [] (size_t n) {
    OJson f;
    f["feature"] = {{"dtype", "float32"}, {"_type", "Value"}};
    f["length"] = n;
    f["_type"] = "List";
    return f;
  };
  feats["observation.state"] = vec (s.state_names.size ());
  feats["action"] = vec (s.action_names.size ());
  feats["timestamp"] = {{"dtype", "float32"}, {"_type", "Value"}};
  for (const char *k : kDefaultInts)
    feats[k] = {{"dtype", "int64"}, {"_type", "Value"}};
  OJson md;
  md["info"] = {{"features", feats}};
  return arrow::key_value_metadata ({"huggingface"}, {md.dump ()});
}

bool
whole_number (const pi0::json::Value &v, int64_t lo, int64_t hi, const std::string &what,
              int64_t *out, std::string *error)
{
  if (v.is_number_integer ()) {
    const int64_t i = v.is_number_unsigned () && v.get<uint64_t> () > (uint64_t)INT64_MAX
                          ? INT64_MAX
                          : v.get<int64_t> ();
    if (i >= lo && i <= hi) {
      *out = i;
      return true;
    }
  } else if (v.is_number_float ()) {
    const double d = v.get<double> ();
    if (std::isfinite (d) && d == std::floor (d) && d >= (double)lo && d <= (double)hi) {
      *out = (int64_t)d;
      return true;
    }
    if (std::isfinite (d) && d != std::floor (d))
      return fail (error, what + " is " + v.dump () + ", not a whole number");
  } else {
    return fail (error, what + " is " + v.dump () + ", not a number");
  }
  return fail (error, what + " is " + v.dump () + ", outside " + std::to_string (lo) + ".." +
                          std::to_string (hi));
}

bool
parse_features (const pi0::json::Value &info, Schema *s, std::string *error)
{
  if (!info.is_object () || !info.contains ("features") || !info["features"].is_object ())
    return fail (error, "info.json has no features");
  for (auto it = info["features"].begin (); it != info["features"].end (); ++it) {
    const auto &f = it.value ();
    const std::string name = "info.json: feature '" + it.key () + "'";
    if (!f.is_object ())
      return fail (error, name + " is not an object");
    const std::string dtype =
        f.contains ("dtype") && f["dtype"].is_string () ? f["dtype"].get<std::string> () : "";
    const bool shaped = f.contains ("shape") && f["shape"].is_array ();
    if (dtype == "video" || dtype == "image") {
      if (dtype == "image")
        return fail (error, name + " is stored as images; only video datasets are supported");
      Camera c;
      c.key = it.key ();
      if (!shaped || f["shape"].size () != 3)
        return fail (error, name + " has no [height, width, channels] shape");
      /* LeRobot writes [height, width, channels]; datasets converted from older versions may
       * say [channels, height, width] in their names. */
      int hi = 0, wi = 1, ci = 2;
      if (f.contains ("names") && f["names"].is_array () && f["names"].size () == 3 &&
          f["names"][0].is_string () &&
          f["names"][0].get<std::string> ().rfind ("channel", 0) == 0) {
        ci = 0;
        hi = 1;
        wi = 2;
      }
      int64_t h, w, ch;
      if (!whole_number (f["shape"][hi], 1, kMaxSide, name + " height", &h, error) ||
          !whole_number (f["shape"][wi], 1, kMaxSide, name + " width", &w, error) ||
          !whole_number (f["shape"][ci], 1, 4, name + " channels", &ch, error))
        return false;
      if (ch != 3)
        return fail (error, name + " has " + std::to_string (ch) +
                                " channels; only RGB (3-channel) cameras are played");
      c.height = (int)h;
      c.width = (int)w;
      if (f.contains ("info") && f["info"].is_object ()) {
        const auto &vi = f["info"];
        if (vi.contains ("video.codec") && vi["video.codec"].is_string ())
          c.codec = vi["video.codec"].get<std::string> ();
        else
          c.codec = "";
        if (vi.contains ("video.pix_fmt") && vi["video.pix_fmt"].is_string ())
          c.pix_fmt = vi["video.pix_fmt"].get<std::string> ();
      }
      s->cameras.push_back (c);
    } else if (it.key () == "observation.state" || it.key () == "action") {
      if (!shaped || f["shape"].size () != 1)
        return fail (error, name + " is not a vector (its shape is not [n])");
      int64_t n;
      if (!whole_number (f["shape"][0], 1, kMaxDim, name + " size", &n, error))
        return false;
      std::vector<std::string> names;
      if (f.contains ("names") && f["names"].is_array ())
        for (auto &nm : f["names"])
          names.push_back (nm.is_string () ? nm.get<std::string> () : "");
      names.resize ((size_t)n);
      (it.key () == "action" ? s->action_names : s->state_names) = names;
    }
  }
  if (!info.contains ("fps"))
    return fail (error, "info.json has no fps");
  int64_t fps;
  if (!whole_number (info["fps"], 1, kMaxFps, "info.json: fps", &fps, error))
    return false;
  s->fps = (int)fps;
  if (info.contains ("robot_type") && info["robot_type"].is_string ())
    s->robot_type = info["robot_type"].get<std::string> ();
  if (s->state_names.empty () || s->action_names.empty ())
    return fail (error, "the dataset has no observation.state or action feature");
  return true;
}

} // namespace pi0::lerobot
